// Short call stacks for diagnostics: captured as return addresses (cheap) when a node or a sync is
// created with diagnostics on, interned to a small id, and turned into the user's file:line frames only
// when a finding is written, by elfutils' libdw from the program's debug information. Internal to lazy/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lazyrt::detail {

// Starts tagging new IR nodes (inputs, constants, nodes made inside lazyrt's helpers) with their call
// stacks. Called once when the runtime starts with diagnostics on (LAZYRT_DEBUG, LAZYRT_REPORT or
// LAZYRT_TRACE); without it, ids are 0.
void EnableCallStacks();
// The interned id of the calling thread's call stack; 0 when capture is off or the table is full.
uint16_t CaptureCallStack();
// The innermost `max_frames` frames of stack `id` in the user's code (not lazyrt's, not the system's),
// "file:line", innermost first. Empty for id 0, or when the program has no line information (build it
// with -g or -g1 to see call stacks).
std::vector<std::string> UserFrames(uint16_t id, size_t max_frames = 4);
// The frames joined innermost first: "a.cc:12 <- a.cc:40 <- main.cc:7".
std::string StackText(const std::vector<std::string>& frames);

}  // namespace lazyrt::detail
