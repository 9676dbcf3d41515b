# loom_add_library(<name> SOURCES ... DEPS ...): one room's library, with the project root as its
# include directory so that headers are included as "core/ir/anf.h".
# Installed headers live under <prefix>/include/loom, so the same "core/ir/anf.h" works there.
# Every room library is listed in the global property LOOM_LIBRARIES (installed and exported).
function(loom_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                            $<INSTALL_INTERFACE:include/loom>)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  set_property(GLOBAL APPEND PROPERTY LOOM_LIBRARIES ${name})
endfunction()

# loom_add_proto_library(<name> PROTOS <file.proto relative to this folder>...): runs protoc from
# the project root, so "checkpoint/proto/checkpoint.proto" becomes
# ${PROJECT_BINARY_DIR}/gen/checkpoint/proto/checkpoint.pb.{h,cc}, included as
# "checkpoint/proto/checkpoint.pb.h"; a static library of the generated code (not warned about).
function(loom_add_proto_library name)
  cmake_parse_arguments(ARG "" "" "PROTOS" ${ARGN})
  find_package(Protobuf REQUIRED)
  file(RELATIVE_PATH rel_dir ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  set(gen_root ${PROJECT_BINARY_DIR}/gen)
  set(srcs)
  foreach(proto ${ARG_PROTOS})
    get_filename_component(stem ${proto} NAME_WE)
    get_filename_component(sub ${proto} DIRECTORY)
    set(out ${gen_root}/${rel_dir}/${sub})
    add_custom_command(
      OUTPUT ${out}/${stem}.pb.cc ${out}/${stem}.pb.h
      COMMAND ${CMAKE_COMMAND} -E make_directory ${gen_root}
      COMMAND protobuf::protoc --cpp_out=${gen_root} -I ${PROJECT_SOURCE_DIR}
              -I ${Protobuf_INCLUDE_DIRS} ${CMAKE_CURRENT_SOURCE_DIR}/${proto}
      DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${proto} protobuf::protoc
      COMMENT "protoc ${rel_dir}/${proto}")
    list(APPEND srcs ${out}/${stem}.pb.cc)
  endforeach()
  add_library(${name} STATIC ${srcs})
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${gen_root}>
                                            $<INSTALL_INTERFACE:include/loom>)
  set_property(GLOBAL APPEND PROPERTY LOOM_LIBRARIES ${name})
  target_link_libraries(${name} PUBLIC protobuf::libprotobuf)
  target_compile_options(${name} PRIVATE -w)
endfunction()
