cmake_minimum_required(VERSION 3.25)
# Runs examples/train_gpt as a process at test size and checks the JSON on its last line.
#   -DTRAIN=path -DCHECK=graphs|cold_warm|convergence|bad_input|mesh -DWORK=dir
include(${CMAKE_CURRENT_LIST_DIR}/run_example.cmake)
# Two layers of width 32, context 16: every op of the default model, in seconds.
set(small --layers 2 --heads 2 --width 32 --context 16 --batch 4 --sample-tokens 8)

if(CHECK STREQUAL "graphs")
  # Training, validation and sampling: three graphs for the whole run, whatever the number of steps,
  # evaluations and sampled tokens (the sampler's fixed window).
  run_train(whole ${small} --steps 12 --eval-every 4)
  expect_field("${whole}" graphs_compiled EQUAL 3)
  # Gradient accumulation traced into the step: still one training graph.
  run_train(accum ${small} --steps 6 --eval-every 0 --accum 3)
  expect_field("${accum}" graphs_compiled EQUAL 3)
  # A sync after every micro-batch makes the variants of torch_xla's field report: the first
  # micro-batch creates the gradients, the middle one adds to them, the last one also updates.
  run_train(accum_micro ${small} --steps 4 --eval-every 0 --accum 3 --accum-sync micro)
  expect_field("${accum_micro}" graphs_compiled EQUAL 5)
  # Split mode: forward+backward, then clipping and the update.
  run_train(split ${small} --steps 6 --eval-every 0 --mode split)
  expect_field("${split}" graphs_compiled EQUAL 4)
  # A barrier after every block cuts the training step at both blocks: three training graphs.
  run_train(barriers ${small} --steps 6 --eval-every 0 --barrier-every 1)
  expect_field("${barriers}" graphs_compiled EQUAL 5)
  # bf16 matmuls (f32 accumulation and weights) are a training run of their own kind: same count.
  run_train(bf16 ${small} --steps 6 --eval-every 0 --dtype bf16)
  expect_field("${bf16}" graphs_compiled EQUAL 3)
  foreach(run whole accum split barriers bf16)
    string(JSON loss GET "${${run}}" final_loss)
    if(loss STREQUAL "null")
      message(FATAL_ERROR "${run}: the loss is not finite")
    endif()
  endforeach()
  # Split mode and barriers change the graphs, not the arithmetic.
  run_train(whole6 ${small} --steps 6 --eval-every 0)
  run_train(accum_step ${small} --steps 4 --eval-every 0 --accum 3)
  string(JSON a GET "${accum_step}" final_loss)
  string(JSON b GET "${accum_micro}" final_loss)
  if(NOT a STREQUAL b)
    message(FATAL_ERROR "syncing every micro-batch changed the loss: ${b}, not ${a}")
  endif()
  foreach(run split barriers)
    string(JSON a GET "${whole6}" final_loss)
    string(JSON b GET "${${run}}" final_loss)
    if(NOT a STREQUAL b)
      message(FATAL_ERROR "${run} final_loss ${b} differs from whole mode's ${a}")
    endif()
  endforeach()
elseif(CHECK STREQUAL "cold_warm")
  # A second process on the same cache compiles nothing and reproduces the run bit for bit: losses,
  # validation loss and the sampled text.
  run_train(cold ${small} --steps 8 --eval-every 4 --cache-dir ${WORK}/shared)
  run_train(warm ${small} --steps 8 --eval-every 4 --cache-dir ${WORK}/shared)
  expect_field("${cold}" persistent_cache_misses GREATER_EQUAL 3)
  expect_field("${warm}" graphs_compiled EQUAL 0)
  expect_field("${warm}" persistent_cache_misses EQUAL 0)
  expect_field("${warm}" persistent_cache_hits GREATER_EQUAL 3)
  foreach(field final_loss val_loss sample)
    string(JSON a GET "${cold}" ${field})
    string(JSON b GET "${warm}" ${field})
    if(NOT a STREQUAL b)
      message(FATAL_ERROR "warm ${field} '${b}' differs from cold '${a}'")
    endif()
  endforeach()
  # Another seed is another run.
  run_train(other ${small} --steps 8 --eval-every 4 --seed 5)
  string(JSON a GET "${cold}" final_loss)
  string(JSON b GET "${other}" final_loss)
  if(a STREQUAL b)
    message(FATAL_ERROR "seed 5 gave the same final_loss ${a} as seed 0")
  endif()
elseif(CHECK STREQUAL "convergence")
  # It learns the text: validation loss below 0.6 ln(vocab) (2.84 nats for fortunes' 114 symbols) after
  # 200 steps of a two-layer model; a unigram model of the characters stays near 3.
  run_train(run --layers 2 --heads 2 --width 64 --context 64 --batch 16 --steps 200 --eval-every 100)
  string(JSON vocab GET "${run}" vocab)
  string(JSON val GET "${run}" val_loss)
  execute_process(COMMAND awk "BEGIN { exit !(${val} < 0.6 * log(${vocab})) }" RESULT_VARIABLE below)
  if(NOT below EQUAL 0)
    message(FATAL_ERROR "val_loss ${val} is not below 0.6 ln(${vocab})")
  endif()
elseif(CHECK STREQUAL "mesh")
  # Data parallel over a mesh of 4 devices (SPMD: the batch split, the gradients all-reduced) trains as
  # one device does: the same losses to 1e-4 relative after 30 steps (f32 sums in another order), still three
  # graphs, and no op computed replicated for want of a partitioning rule.
  run_train(one ${small} --steps 30 --eval-every 0)
  run_train(four ${small} --steps 30 --eval-every 0 --mesh data=4)
  expect_field("${four}" devices EQUAL 4)
  expect_field("${four}" graphs_compiled EQUAL 3)
  # Replicated parameters: every device holds all of them and AdamW's two moments, f32 (the arithmetic
  # of data parallelism's memory: 3 x 4 bytes per parameter on each device, at least).
  string(JSON parameters GET "${four}" parameters)
  math(EXPR replicated "${parameters} * 12")
  string(JSON peaks LENGTH "${four}" peak_device_bytes)
  if(NOT peaks EQUAL 4)
    message(FATAL_ERROR "peak_device_bytes has ${peaks} entries for a mesh of 4 devices")
  endif()
  foreach(d RANGE 3)
    string(JSON peak GET "${four}" peak_device_bytes ${d})
    if(peak LESS replicated)
      message(FATAL_ERROR "device ${d}'s peak ${peak} bytes is below its replicated parameters and moments (${replicated})")
    endif()
  endforeach()
  string(JSON a GET "${one}" final_loss)
  string(JSON b GET "${four}" final_loss)
  execute_process(COMMAND awk "BEGIN { d = ${a} - ${b}; exit !(d * d <= (1e-4 * ${a}) ^ 2) }" RESULT_VARIABLE near)
  if(NOT near EQUAL 0)
    message(FATAL_ERROR "final_loss on a data=4 mesh ${b} is not within 1e-4 relative of one device's ${a}")
  endif()
  expect_field("${four}" spmd_replicated_fallbacks EQUAL 0)
  # Gradient bucketing (the all-reduce combiner, on by default) changes the number of collectives, not a
  # bit of the result: the same run with one all-reduce per gradient ends on the same loss.
  set(ENV{LAZYRT_ALL_REDUCE_COMBINE_BYTES} 0)
  run_train(four_unbucketed ${small} --steps 30 --eval-every 0 --mesh data=4)
  unset(ENV{LAZYRT_ALL_REDUCE_COMBINE_BYTES})
  string(JSON u GET "${four_unbucketed}" final_loss)
  if(NOT u STREQUAL b)
    message(FATAL_ERROR "final_loss on a data=4 mesh with one all-reduce per gradient ${u} differs from the "
                        "bucketed run's ${b}")
  endif()

  # Megatron tensor parallel over data=2,model=2: the same losses again, every op partitioned by a rule.
  run_train(tp ${small} --steps 30 --eval-every 0 --mesh data=2,model=2 --cache-dir ${WORK}/tp-cache)
  expect_field("${tp}" devices EQUAL 4)
  expect_field("${tp}" graphs_compiled EQUAL 3)
  expect_field("${tp}" spmd_replicated_fallbacks EQUAL 0)
  string(JSON c GET "${tp}" final_loss)
  execute_process(COMMAND awk "BEGIN { d = ${a} - ${c}; exit !(d * d <= (1e-4 * ${a}) ^ 2) }" RESULT_VARIABLE near)
  if(NOT near EQUAL 0)
    message(FATAL_ERROR "final_loss on a data=2,model=2 mesh ${c} is not within 1e-4 relative of one device's ${a}")
  endif()
  # The split weights' arithmetic, at a width where the weights dominate a device's memory (at width 32 its
  # peak is mostly activations and the executables' arenas). Each block (width C = 128) splits over "model" its
  # qkv weight 3C x C and bias 3C, its MLP input weight 4C x C and bias 4C (column-parallel), its attention
  # and MLP output weights C x C and C x 4C (row-parallel): S = 2 layers x (12 C^2 + 7 C) = 395008 of the P
  # parameters. A device holds each parameter and its two AdamW moments (f32: 12 bytes a parameter), whole or
  # its half of the split ones:
  #   data=2,model=2:  12 (P - S) + 12 S / 2 bytes at least, and
  #   12 S / 2 = 2370048 bytes fewer than a device of data=4, which holds all of them (as do its gradients and
  #   the updated parameters: the real difference is a few times larger, the bound is conservative).
  set(wide --layers 2 --heads 4 --width 128 --context 8 --batch 4 --sample-tokens 8 --steps 4 --eval-every 0)
  run_train(wide_dp ${wide} --mesh data=4)
  run_train(wide_tp ${wide} --mesh data=2,model=2)
  string(JSON wide_parameters GET "${wide_tp}" parameters)
  set(split 395008)
  math(EXPR held "(${wide_parameters} - ${split}) * 12 + ${split} * 12 / 2")
  math(EXPR saved "${split} * 12 / 2")
  foreach(d RANGE 3)
    string(JSON peak GET "${wide_tp}" peak_device_bytes ${d})
    string(JSON replicated_peak GET "${wide_dp}" peak_device_bytes ${d})
    math(EXPR bound "${replicated_peak} - ${saved}")
    if(peak LESS held OR peak GREATER bound)
      message(FATAL_ERROR "device ${d}'s peak ${peak} bytes on data=2,model=2 is not from its parameters and "
                          "moments (${held}) to the data=4 peak less the split half (${bound})")
    endif()
  endforeach()
  # A second process compiles nothing: the SPMD executables come from the disk cache.
  run_train(tp_warm ${small} --steps 30 --eval-every 0 --mesh data=2,model=2 --cache-dir ${WORK}/tp-cache)
  expect_field("${tp_warm}" graphs_compiled EQUAL 0)
  expect_field("${tp_warm}" persistent_cache_misses EQUAL 0)
  expect_field("${tp_warm}" persistent_cache_hits GREATER_EQUAL 3)
  string(JSON w GET "${tp_warm}" final_loss)
  if(NOT w STREQUAL c)
    message(FATAL_ERROR "the warm data=2,model=2 run's final_loss ${w} differs from the cold run's ${c}")
  endif()

  # The collective share of the step: the gradients' all-reduces take some of it, never all of it (one
  # device has none).
  string(JSON share GET "${four}" collective_share)
  string(JSON collective_ms GET "${four}" collective_ms_per_step)
  string(JSON one_share GET "${one}" collective_share)
  execute_process(COMMAND awk "BEGIN { exit !(${share} > 0 && ${share} < 1 && ${collective_ms} > 0 && ${one_share} == 0) }"
                  RESULT_VARIABLE ok)
  if(NOT ok EQUAL 0)
    message(FATAL_ERROR "collective_share ${share} (${collective_ms} ms per step) on a data=4 mesh is not in (0, 1), "
                        "or one device's (${one_share}) is not 0")
  endif()
  expect_failure("--batch \\(6\\) must be divisible by the mesh's data axis \\(4\\)" ${small} --batch 6 --mesh data=4)
  expect_failure("--mesh: unknown or misplaced axis 'expert'" ${small} --mesh data=2,expert=2)
  expect_failure("--mesh: unknown or misplaced axis 'data'" ${small} --mesh model=2,data=2)
  expect_failure("--mesh: expected data=D or data=D,model=M, got 'data'" ${small} --mesh data)
  expect_failure("--mesh model needs an integer from 1 to 64, got '0'" ${small} --mesh data=2,model=0)
  expect_failure("--mesh data=16,model=8 needs more than 64 devices" ${small} --mesh data=16,model=8)
  expect_failure("--heads \\(2\\) must be divisible by the mesh's model axis \\(4\\)" ${small} --mesh model=4)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env LAZYRT_DEVICES=2 ${TRAIN} ${small} --mesh data=2,model=2
                  --cache-dir ${WORK}/cache-failures ERROR_VARIABLE err RESULT_VARIABLE rc OUTPUT_QUIET)
  if(rc EQUAL 0 OR NOT err MATCHES "--mesh needs 4 devices but LAZYRT_DEVICES is 2")
    message(FATAL_ERROR "a mesh larger than LAZYRT_DEVICES must be refused; got ${rc}: ${err}")
  endif()
elseif(CHECK STREQUAL "bad_input")
  file(WRITE ${WORK}/empty.txt "")
  expect_failure("empty.txt: the text is empty" ${small} --data ${WORK}/empty.txt)
  # CMake strings cannot hold a NUL byte: printf writes it.
  execute_process(COMMAND printf "text\\000more" OUTPUT_FILE ${WORK}/binary.txt)
  string(ASCII 1 2 controls)
  file(WRITE ${WORK}/control.txt "text")
  foreach(i RANGE 40)
    file(APPEND ${WORK}/control.txt "${controls}")
  endforeach()
  expect_failure("binary.txt: binary data \\(a NUL byte at offset 4\\)" ${small} --data ${WORK}/binary.txt)
  expect_failure("control.txt: binary data \\([0-9]+ control bytes" ${small} --data ${WORK}/control.txt)
  file(WRITE ${WORK}/short.txt "one\n%\ntwo\n%\n")
  expect_failure("fewer than one context window plus its target \\(17\\)" ${small} --data ${WORK}/short.txt)
  expect_failure("no such file or directory" ${small} --data ${WORK}/missing)
  expect_failure("--heads \\(3\\) must divide --width \\(32\\)" --heads 3 --width 32)
  expect_failure("--context needs an integer from 1 to 4096, got '5000'" --context 5000)
  expect_failure("--dtype is f32 or bf16, got 'f16'" --dtype f16)
  string(ASCII 1 start_of_heading)  # no fortune has it
  expect_failure("--prompt: byte 1 at offset 1 is not in the corpus's vocabulary" ${small} --prompt "a${start_of_heading}")
  expect_failure("--prompt has 20 characters, more than --context \\(16\\)" ${small} --prompt "01234567890123456789")
  expect_failure("unknown flag --bogus" --bogus 1)
else()
  message(FATAL_ERROR "unknown CHECK ${CHECK}")
endif()
