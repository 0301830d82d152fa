# End-to-end checks of the `lrkv` binary: eval/generate on the real model, and a
# one-line error naming the file and the problem for malformed checkpoints.
function(run_lrkv)
  execute_process(COMMAND ${LRKV} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  set(rc "${rc}" PARENT_SCOPE)
  set(out "${out}" PARENT_SCOPE)
  set(err "${err}" PARENT_SCOPE)
endfunction()

set(model ${SHARED}/models/stories260K.gguf)
set(text ${SHARED}/data/tinystories-valid-excerpt.txt)

run_lrkv(eval --checkpoint ${model} --text ${text} --json)
if(NOT rc EQUAL 0 OR NOT out MATCHES "\"perplexity\": [0-9.]+" OR NOT out MATCHES "\"stories\": 134")
  message(FATAL_ERROR "eval failed (${rc}): ${out} ${err}")
endif()

run_lrkv(generate --checkpoint ${model} --prompt "Once upon a time" --max-tokens 16)
if(NOT rc EQUAL 0 OR NOT out MATCHES "^Once upon a time[ ,][a-zA-Z ,.]+")
  message(FATAL_ERROR "generate failed (${rc}): ${out} ${err}")
endif()

foreach(bad st_gap.safetensors gguf_quantized.gguf st_truncated.safetensors)
  foreach(cmd eval generate)
    if(cmd STREQUAL "eval")
      run_lrkv(eval --checkpoint ${FIXTURES}/malformed/${bad} --text ${text})
    else()
      run_lrkv(generate --checkpoint ${FIXTURES}/malformed/${bad} --prompt hi)
    endif()
    string(REGEX MATCHALL "\n" newlines "${err}")
    list(LENGTH newlines lines)
    if(rc EQUAL 0 OR NOT lines EQUAL 1 OR NOT err MATCHES "${bad}: ")
      message(FATAL_ERROR "${cmd} on ${bad}: rc=${rc}, want one error line naming the file: ${err}")
    endif()
    message(STATUS "${cmd} ${bad}: rc=${rc}: ${err}")
  endforeach()
endforeach()

# tokenize: JSON ids per document, BOS only with --add-special, a round trip.
run_lrkv(tokenize --checkpoint ${model} --prompt "Once upon a time" --json --decode)
if(NOT rc EQUAL 0 OR NOT out MATCHES "^{\"decoded\":\\[\"Once upon a time\"\\],\"ids\":\\[\\[[0-9,]+\\]\\]}")
  message(FATAL_ERROR "tokenize --json failed (${rc}): ${out} ${err}")
endif()
run_lrkv(tokenize --checkpoint ${model} --prompt "Once upon a time" --add-special)
if(NOT rc EQUAL 0 OR NOT out MATCHES "^1 [0-9 ]+\n$")
  message(FATAL_ERROR "tokenize --add-special should start with BOS 1 (${rc}): ${out} ${err}")
endif()
run_lrkv(tokenize --checkpoint ${model} --text ${text} --json)
string(REGEX REPLACE "[^]]" "" closers "${out}")
string(LENGTH "${closers}" closing)
if(NOT rc EQUAL 0 OR NOT closing EQUAL 135)  # 134 stories + the outer list
  message(FATAL_ERROR "tokenize --text: want 134 id lists, got ${closing}, rc=${rc} ${err}")
endif()
run_lrkv(tokenize --checkpoint ${model})
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "tokenize without --text/--prompt should be a usage error (2), got ${rc}")
endif()
run_lrkv(tokenize --checkpoint ${FIXTURES}/malformed_tokenizers/bad_regex --prompt hi)
if(rc EQUAL 0 OR NOT err MATCHES "tokenizer.json: pre_tokenizer \\(Split\\): regular expression")
  message(FATAL_ERROR "tokenize on a malformed tokenizer.json: rc=${rc} ${err}")
endif()

run_lrkv(eval --checkpoint ${model})
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "missing --text should be a usage error (2), got ${rc}")
endif()

# Conversion: an impossible request fails with the valid range and writes nothing.
set(outdir ${CMAKE_CURRENT_BINARY_DIR}/cli_convert_out)
file(REMOVE_RECURSE ${outdir})
run_lrkv(convert --checkpoint ${model} --variant lrkv --rank 9 --out ${outdir})
if(rc EQUAL 0 OR NOT err MATCHES "must lie in \\[0, 8\\]" OR EXISTS ${outdir})
  message(FATAL_ERROR "convert --rank 9: rc=${rc} err=${err}")
endif()
run_lrkv(convert --checkpoint ${model} --variant lrkv --budget 0.5 --out ${outdir})
if(NOT rc EQUAL 0 OR NOT EXISTS ${outdir}/model.safetensors OR NOT out MATCHES "lrkv r=2")
  message(FATAL_ERROR "convert --budget 0.5: rc=${rc} ${out} ${err}")
endif()
run_lrkv(eval --checkpoint ${outdir} --text ${text} --json)
if(NOT rc EQUAL 0 OR NOT out MATCHES "\"perplexity\"")
  message(FATAL_ERROR "eval of the converted checkpoint: rc=${rc} ${err}")
endif()
file(REMOVE_RECURSE ${outdir})

run_lrkv(cache --layers 18 --heads 18 --head-dim 128 --rank 55 --context 2048 --dtype bf16)
if(NOT rc EQUAL 0 OR NOT out MATCHES "mha +mha +4608 +324.00" OR NOT out MATCHES "48.52%")
  message(FATAL_ERROR "cache: rc=${rc} ${out} ${err}")
endif()

# Verification as a CI gate: a plane-mode conversion passes; requiring plane mode of a
# free conversion fails with exit 1 and a JUnit failure.
foreach(mode plane reconstruct)
  file(REMOVE_RECURSE ${outdir}_${mode})
  run_lrkv(convert --checkpoint ${model} --variant lrkv --rank 2 --rope-mode ${mode}
           --out ${outdir}_${mode})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "convert ${mode}: ${err}")
  endif()
endforeach()
run_lrkv(verify --checkpoint ${outdir}_plane --source ${model} --text ${text}
         --prompt-tokens 12 --decode-tokens 6 --junit ${outdir}_ok.xml --json-out ${outdir}_ok.json)
file(READ ${outdir}_ok.xml junit)
if(NOT rc EQUAL 0 OR NOT out MATCHES "verdict: PASS" OR NOT junit MATCHES "failures=\"0\"")
  message(FATAL_ERROR "verify plane: rc=${rc} ${out} ${err}")
endif()
run_lrkv(verify --checkpoint ${outdir}_reconstruct --rope-mode reconstruct,plane
         --prompt-tokens 8 --decode-tokens 4 --junit ${outdir}_bad.xml)
file(READ ${outdir}_bad.xml junit)
if(NOT rc EQUAL 1 OR NOT junit MATCHES "<failure message=\"plane was required")
  message(FATAL_ERROR "verify required plane: rc=${rc} ${out} ${err} ${junit}")
endif()
file(REMOVE_RECURSE ${outdir}_plane ${outdir}_reconstruct)
file(REMOVE ${outdir}_ok.xml ${outdir}_ok.json ${outdir}_bad.xml)

# The CI recipe through the service (clients/ci_verify.sh): passes on a plane-mode
# conversion, exits 1 with a JUnit failure when plane mode is required of a free one.
if(WITH_SERVICE)
  foreach(mode plane reconstruct)
    file(REMOVE_RECURSE ${outdir}_svc_${mode})
    run_lrkv(convert --checkpoint ${model} --variant lrkv --rank 2 --rope-mode ${mode}
             --out ${outdir}_svc_${mode})
  endforeach()
  execute_process(COMMAND bash ${SOURCE}/clients/ci_verify.sh ${outdir}_svc_plane
                  ${outdir}_svc_ok.xml "{\"prompt_tokens\": 8, \"decode_tokens\": 4}"
                  WORKING_DIRECTORY ${SOURCE} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "ci_verify.sh on a plane conversion: rc=${rc} ${out} ${err}")
  endif()
  execute_process(COMMAND bash ${SOURCE}/clients/ci_verify.sh ${outdir}_svc_reconstruct
                  ${outdir}_svc_bad.xml
                  "{\"rope_mode\": [\"plane\"], \"prompt_tokens\": 8, \"decode_tokens\": 4}"
                  WORKING_DIRECTORY ${SOURCE} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  file(READ ${outdir}_svc_bad.xml junit)
  if(NOT rc EQUAL 1 OR NOT junit MATCHES "<failure")
    message(FATAL_ERROR "ci_verify.sh should fail the gate: rc=${rc} ${out} ${err}")
  endif()
  file(REMOVE_RECURSE ${outdir}_svc_plane ${outdir}_svc_reconstruct)
  file(REMOVE ${outdir}_svc_ok.xml ${outdir}_svc_bad.xml)
endif()

# The decode bench's device choice: a bad device is named; --device cuda either
# runs (a GPU is present) or says why it cannot (no nvcc at configure time, or
# no device), never silently falls back to the CPU.
run_lrkv(bench decode --device tpu --context 64)
if(rc EQUAL 0 OR NOT err MATCHES "--device 'tpu' must be one of cpu, cuda")
  message(FATAL_ERROR "bench decode --device tpu: rc=${rc} ${err}")
endif()
run_lrkv(bench decode --device cuda --heads 2 --head-dim 8 --rank 2 --batch 1
         --context 64 --iterations 1)
if(rc EQUAL 0)
  if(NOT out MATCHES "CUDA on " OR NOT out MATCHES "lrkv-plane")
    message(FATAL_ERROR "bench decode --device cuda ran but printed: ${out}")
  endif()
elseif(NOT err MATCHES "no CUDA device is available|this build has no CUDA kernels")
  message(FATAL_ERROR "bench decode --device cuda: rc=${rc} ${err}")
endif()
message(STATUS "bench decode --device cuda: rc=${rc} ${err}")

# lrkv-kernel-bench: the same bench without LibTorch or gRPC.
execute_process(COMMAND ${KERNEL_BENCH} --heads 2 --head-dim 8 --rank 2 --batch 1
                        --context 64 --iterations 1 --threads 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "lrkv-norope" OR NOT out MATCHES "stream")
  message(FATAL_ERROR "lrkv-kernel-bench: rc=${rc} ${out} ${err}")
endif()
execute_process(COMMAND ${KERNEL_BENCH} --context 64,x
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "--context has the wrong type")
  message(FATAL_ERROR "lrkv-kernel-bench --context 64,x: rc=${rc} ${err}")
endif()
