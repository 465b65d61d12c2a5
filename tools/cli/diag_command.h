// "lazyrt diag REPORT.json": a run report's findings, worst first.
#pragma once

#include "tools/cli/command.h"

namespace lazyrt::cli {

Command DiagCommand();

}  // namespace lazyrt::cli
