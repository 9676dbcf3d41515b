# The C++ API reference (docs/api/Doxyfile.in): Doxygen from Debian over LOOM_PUBLIC_HEADERS.
# `ninja api_docs` builds it; tests/ runs it with warnings as errors.
find_program(LOOM_DOXYGEN doxygen)
set(LOOM_API_DOCS_OUT ${PROJECT_BINARY_DIR}/docs/api)
set(LOOM_API_DOCS_INPUT "")
foreach(header ${LOOM_PUBLIC_HEADERS})
  string(APPEND LOOM_API_DOCS_INPUT " ${PROJECT_SOURCE_DIR}/${header}")
endforeach()
string(APPEND LOOM_API_DOCS_INPUT " ${PROJECT_SOURCE_DIR}/docs/api/mainpage.md"
              " ${PROJECT_SOURCE_DIR}/docs/api/namespaces.dox")
configure_file(${PROJECT_SOURCE_DIR}/docs/api/Doxyfile.in ${LOOM_API_DOCS_OUT}/Doxyfile @ONLY)
if(LOOM_DOXYGEN)
  add_custom_target(api_docs
                    COMMAND ${LOOM_DOXYGEN} ${LOOM_API_DOCS_OUT}/Doxyfile
                    WORKING_DIRECTORY ${LOOM_API_DOCS_OUT}
                    COMMENT "Doxygen: the C++ API reference in ${LOOM_API_DOCS_OUT}/html"
                    VERBATIM)
endif()
