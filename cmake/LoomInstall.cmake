# `cmake --install build --prefix P`: the room libraries and the umbrella target loom (exported as
# loom::loom, with loom::loom_<room> for each room), the headers under P/include/loom (the rooms'
# .h files and the generated protobuf headers they include), the loom and ir-opt tools, a CMake
# package (P/lib/cmake/loom: find_package(loom CONFIG REQUIRED) finds the dependencies again) and
# a pkg-config file (P/lib/pkgconfig/loom.pc).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(LOOM_LIBRARIES GLOBAL PROPERTY LOOM_LIBRARIES)
install(TARGETS ${LOOM_LIBRARIES} loom EXPORT loomTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom)
install(TARGETS loom_cli ir-opt RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The public headers: what a user's program includes (docs/cpp-guide.md, examples/) and what those
# include in turn. Each is documented (the API reference, docs/api: Doxygen fails on an
# undocumented public symbol); the rooms' other headers (kernels, passes, writers' internals, the
# CLI's driver) stay inside the tree. Not the CUDA backend's headers: a user reaches the GPU
# through backends/backend.h.
set(LOOM_PUBLIC_HEADERS
    core/ir/abstract.h core/ir/anf.h core/ir/control_flow.h core/ir/device.h core/ir/dtype.h
    core/ir/error.h core/ir/parser.h core/ir/printer.h core/ir/tensor.h core/ir/value.h
    core/ir/verify.h core/autodiff/grad.h core/random/random.h core/trace/graph_emitter.h
    core/trace/tracer.h core/passes/pipeline.h core/passes/amp.h
    ops/op.h ops/emitter.h
    backends/backend.h backends/kernel.h backends/eager.h
    runtime/compiled_function.h runtime/executable.h runtime/interpreter.h runtime/memory_plan.h
    runtime/observer.h
    data/dataset.h data/npy.h
    optim/optimizer.h optim/lr_schedule.h
    nn/callback.h nn/cell.h nn/context.h nn/initializer.h nn/layers.h nn/loss.h nn/metrics.h
    nn/model.h nn/train.h
    parallel/parallel.h
    models/zoo.h models/lenet/lenet.h models/lenet/dataset.h models/resnet/resnet.h
    models/resnet/dataset.h
    checkpoint/checkpoint.h checkpoint/train_state.h
    summary/summary_record.h summary/collector.h summary/reader.h summary/png.h
    summary/idle_worker.h summary/distributions.h
    mindir/mindir.h mindir/graph_net.h mindir/export_graph.h onnx/onnx.h
    debug/dump.h debug/dump_reader.h debug/compare.h debug/numerics.h debug/profiler.h
    debug/profile_reader.h debug/tensor_stats.h debug/watch.h)
foreach(header ${LOOM_PUBLIC_HEADERS})
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom/${dir})
endforeach()
# The one generated header the public ones include (the summary reader's and writer's events).
install(FILES ${PROJECT_BINARY_DIR}/gen/summary/proto/tensorboard.pb.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom/summary/proto)

set(LOOM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/loom)
set(LOOM_HAVE_MPI_EXPORT ${LOOM_HAVE_MPI})
install(EXPORT loomTargets NAMESPACE loom:: DESTINATION ${LOOM_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/loomConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/loomConfig.cmake
                              INSTALL_DESTINATION ${LOOM_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/loomConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/loomConfig.cmake ${PROJECT_BINARY_DIR}/loomConfigVersion.cmake
        DESTINATION ${LOOM_CMAKE_DIR})

# pkg-config: the libraries dependents first (the reverse of the order the rooms made them in).
set(LOOM_HAVE_MPI_EXPORT ${LOOM_HAVE_MPI})
set(LOOM_PC_LIBS "")
set(reversed ${LOOM_LIBRARIES})
list(REVERSE reversed)
foreach(lib ${reversed})
  string(APPEND LOOM_PC_LIBS " -l${lib}")
endforeach()
# The libraries loom's static libraries need that have no pkg-config module of their own
# (Libs.private: `pkg-config --static --libs loom`).
set(LOOM_PC_PRIVATE "")
find_package(OpenMP COMPONENTS CXX QUIET)  # the rooms found them in their own scopes
if(LOOM_HAVE_MPI)
  find_package(MPI COMPONENTS C QUIET)
endif()
foreach(lib ${LOOM_DNNL_LIBRARY} ${OpenMP_CXX_LIBRARIES} ${MPI_C_LIBRARIES})
  if(lib)
    string(APPEND LOOM_PC_PRIVATE " ${lib}")
  endif()
endforeach()
if(LOOM_HAVE_CUDA)
  # cuBLAS and cuDNN are loaded at their first call (backends/gpu/libraries.h), not linked.
  string(APPEND LOOM_PC_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -lrt -ldl")
endif()
string(APPEND LOOM_PC_PRIVATE " -lpthread")
# Relocatable: the prefix is found from the .pc file's own folder (--prefix at install time).
file(RELATIVE_PATH LOOM_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(${PROJECT_SOURCE_DIR}/cmake/loom.pc.in ${PROJECT_BINARY_DIR}/loom.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/loom.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# A Debian package of the same install: `cpack -G DEB --config build/CPackConfig.cmake` (from the
# build folder) makes loom_<version>_<arch>.deb; its dependencies are the Debian packages the
# build found (the -dev ones, since a user builds against loom's headers and static libraries).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME loom)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "loom developers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "A graph-mode deep-learning framework in the family of MindSpore (C++ API and tools)")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libopenblas-dev, libeigen3-dev, libprotobuf-dev, zlib1g-dev, libssl-dev, nlohmann-json3-dev, libdnnl-dev, libopenmpi-dev")
set(CPACK_INSTALL_CMAKE_PROJECTS "${PROJECT_BINARY_DIR};loom;Unspecified;/")
include(CPack)
