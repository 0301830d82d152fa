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

run_lrkv(eval --checkpoint ${model})
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "missing --text should be a usage error (2), got ${rc}")
endif()
