# finegemm_embed_headers(OUT_VAR ROOT PREFIX FUNCTION): generates a source that embeds every .cuh under ROOT for the
# JIT, as include paths PREFIX<relative path>, returned by FUNCTION (a qualified name, e.g. finegemm::jit::library_headers)
# as a finegemm::jit::HeaderSet; sets OUT_VAR to the generated file.
function(finegemm_embed_headers out_var root prefix function)
  string(MAKE_C_IDENTIFIER "${function}" stem)
  set(output "${CMAKE_BINARY_DIR}/generated/${stem}.cpp")
  file(GLOB_RECURSE headers CONFIGURE_DEPENDS "${root}/*.cuh")
  add_custom_command(
    OUTPUT "${output}"
    COMMAND ${CMAKE_COMMAND} -DHEADER_ROOT=${root} -DPREFIX=${prefix} -DFUNCTION=${function} -DOUTPUT=${output}
            -P ${PROJECT_SOURCE_DIR}/cmake/embed_headers.cmake
    DEPENDS ${headers} ${PROJECT_SOURCE_DIR}/cmake/embed_headers.cmake
    COMMENT "Embedding ${prefix} device headers for the JIT")
  set(${out_var} "${output}" PARENT_SCOPE)
endfunction()
