# How CUDA programs are compiled and linked against the sharc runtime: the one
# place that knows the nvcc command line.  Included by the top-level
# CMakeLists.txt after SHARC_NVCC is searched for; does nothing without it.
#
# Sets, for every directory below the top level:
#   SHARC_CUDA_ROOT, SHARC_CUDA_INCLUDE_DIR, SHARC_CUDA_LIBRARY_DIR
#   SHARC_CUDART_LIBRARY, SHARC_CUBLASLT_LIBRARY   full paths
#   SHARC_NCCL_INCLUDE_DIR, SHARC_NCCL_LIBRARY      full paths (NOTFOUND if absent)
#   SHARC_NVCC_FLAGS          -std=c++20 -O2
#   SHARC_CUDA_ARCH_FLAGS     sm_80 and sm_90 code plus compute_90 PTX
#   SHARC_CUDA_INCLUDE_FLAGS  -I<source dir>, -isystem for MPI and NCCL
#   SHARC_CUDA_LINK_LIBRARIES NCCL, cuBLASLt, cudart, MPI, BLAS, oneDNN and
#                             liburing
#   SHARC_CUDA_LINK_FLAGS     rpath of the CUDA and NCCL library directories
#   SHARC_CUDA_RUNTIME_SOURCES  the runtime's .cu files
#   SHARC_CUDA_BUILD_FLAGS_FILE ${CMAKE_BINARY_DIR}/runtime/CudaBuildFlags.txt
# all of them CMake lists, and writes the same to SHARC_CUDA_BUILD_FLAGS_FILE,
# with the paths of the runtime libraries (RUNTIME_LIBRARIES: SharcRuntime,
# SharcRuntimeIO; TRAIN_MAIN_LIBRARY: SharcTrainMain, empty while that target
# does not exist), for tools that run nvcc themselves.

if(NOT SHARC_NVCC)
  return()
endif()

get_filename_component(SHARC_CUDA_ROOT "${SHARC_NVCC}" DIRECTORY)
get_filename_component(SHARC_CUDA_ROOT "${SHARC_CUDA_ROOT}" DIRECTORY)
set(SHARC_CUDA_INCLUDE_DIR ${SHARC_CUDA_ROOT}/include)
find_library(SHARC_CUDART_LIBRARY cudart PATHS ${SHARC_CUDA_ROOT}/lib64
             ${SHARC_CUDA_ROOT}/lib NO_DEFAULT_PATH)
find_library(SHARC_CUBLASLT_LIBRARY cublasLt PATHS ${SHARC_CUDA_ROOT}/lib64
             ${SHARC_CUDA_ROOT}/lib NO_DEFAULT_PATH)
if(NOT SHARC_CUDART_LIBRARY OR NOT SHARC_CUBLASLT_LIBRARY)
  message(FATAL_ERROR "nvcc found at ${SHARC_NVCC}, but not libcudart and "
                      "libcublasLt under ${SHARC_CUDA_ROOT}")
endif()
get_filename_component(SHARC_CUDA_LIBRARY_DIR "${SHARC_CUDART_LIBRARY}"
                       DIRECTORY)

# NCCL ships with the toolkit here; elsewhere it is a separate package.
find_path(SHARC_NCCL_INCLUDE_DIR nccl.h HINTS ${SHARC_CUDA_INCLUDE_DIR})
find_library(SHARC_NCCL_LIBRARY nccl HINTS ${SHARC_CUDA_LIBRARY_DIR})
if(SHARC_NCCL_INCLUDE_DIR AND SHARC_NCCL_LIBRARY)
  message(STATUS "NCCL found: ${SHARC_NCCL_LIBRARY}")
else()
  message(STATUS "NCCL not found: NcclCommunicator is not checked")
endif()

find_package(MPI REQUIRED COMPONENTS CXX)

set(SHARC_NVCC_FLAGS -std=c++20 -O2)
set(SHARC_CUDA_ARCH_FLAGS
  -gencode=arch=compute_80,code=sm_80
  -gencode=arch=compute_90,code=sm_90
  -gencode=arch=compute_90,code=compute_90)
set(SHARC_CUDA_INCLUDE_FLAGS -I${PROJECT_SOURCE_DIR})
foreach(dir ${MPI_CXX_INCLUDE_DIRS} ${SHARC_NCCL_INCLUDE_DIR})
  if(dir AND NOT dir STREQUAL SHARC_CUDA_INCLUDE_DIR)
    list(APPEND SHARC_CUDA_INCLUDE_FLAGS -isystem ${dir})
  endif()
endforeach()
foreach(definition ${MPI_CXX_COMPILE_DEFINITIONS})
  list(APPEND SHARC_CUDA_INCLUDE_FLAGS -D${definition})
endforeach()

# nvcc takes only libraries named .so or .a: libgomp.so.1 goes to the linker
# as it is.
set(SHARC_CUDA_LINK_LIBRARIES ${SHARC_CUBLASLT_LIBRARY} ${SHARC_CUDART_LIBRARY}
    ${MPI_CXX_LIBRARIES} ${BLAS_LIBRARIES} ${SHARC_DNNL_LIBRARY}
    -Xlinker ${SHARC_GOMP_LIBRARY} ${SHARC_URING_LIBRARY})
set(SHARC_CUDA_LINK_FLAGS -Xlinker -rpath -Xlinker ${SHARC_CUDA_LIBRARY_DIR})
if(SHARC_NCCL_LIBRARY)
  list(PREPEND SHARC_CUDA_LINK_LIBRARIES ${SHARC_NCCL_LIBRARY})
  get_filename_component(ncclDir "${SHARC_NCCL_LIBRARY}" DIRECTORY)
  if(NOT ncclDir STREQUAL SHARC_CUDA_LIBRARY_DIR)
    list(APPEND SHARC_CUDA_LINK_FLAGS -Xlinker -rpath -Xlinker ${ncclDir})
  endif()
endif()

set(SHARC_CUDA_RUNTIME_SOURCES
  ${PROJECT_SOURCE_DIR}/runtime/DeviceCuda.cu
  ${PROJECT_SOURCE_DIR}/runtime/GemmCuda.cu)
if(SHARC_NCCL_LIBRARY)
  list(APPEND SHARC_CUDA_RUNTIME_SOURCES
       ${PROJECT_SOURCE_DIR}/runtime/NcclCommunicator.cu)
endif()

# The file: KEY=VALUE lines, VALUE the arguments separated by single spaces.
set(lines)
foreach(entry
    "NVCC|SHARC_NVCC"
    "NVCC_FLAGS|SHARC_NVCC_FLAGS"
    "CUDA_ARCH_FLAGS|SHARC_CUDA_ARCH_FLAGS"
    "INCLUDE_FLAGS|SHARC_CUDA_INCLUDE_FLAGS"
    "LINK_LIBRARIES|SHARC_CUDA_LINK_LIBRARIES"
    "LINK_FLAGS|SHARC_CUDA_LINK_FLAGS"
    "RUNTIME_CUDA_SOURCES|SHARC_CUDA_RUNTIME_SOURCES"
    "CUDA_INCLUDE_DIR|SHARC_CUDA_INCLUDE_DIR"
    "CUDA_LIBRARY_DIR|SHARC_CUDA_LIBRARY_DIR"
    "CUDART_LIBRARY|SHARC_CUDART_LIBRARY"
    "CUBLASLT_LIBRARY|SHARC_CUBLASLT_LIBRARY"
    "NCCL_INCLUDE_DIR|SHARC_NCCL_INCLUDE_DIR"
    "NCCL_LIBRARY|SHARC_NCCL_LIBRARY"
    "MPI_INCLUDE_DIRS|MPI_CXX_INCLUDE_DIRS"
    "MPI_LIBRARIES|MPI_CXX_LIBRARIES")
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 key)
  list(GET parts 1 variable)
  set(value "${${variable}}")
  if(value MATCHES "NOTFOUND$")
    set(value "")
  endif()
  if(value MATCHES " ")
    message(FATAL_ERROR "${variable} has a space in an argument: ${value}")
  endif()
  string(REPLACE ";" " " value "${value}")
  string(APPEND lines "${key}=${value}\n")
endforeach()

set(SHARC_CUDA_BUILD_FLAGS_FILE ${CMAKE_BINARY_DIR}/runtime/CudaBuildFlags.txt)
file(GENERATE OUTPUT ${SHARC_CUDA_BUILD_FLAGS_FILE} CONTENT
"# Generated by cmake/SharcCuda.cmake: how to compile and link a CUDA program
# against the sharc runtime.  KEY=VALUE; VALUE is a list of arguments separated
# by single spaces (no argument contains a space).  Compile each .cu with
#   NVCC NVCC_FLAGS CUDA_ARCH_FLAGS INCLUDE_FLAGS -c FILE.cu -o FILE.o
# (host .cpp files the same way, CUDA_ARCH_FLAGS then unused) and link with
#   NVCC -o PROGRAM OBJECTS... RUNTIME_LIBRARIES LINK_LIBRARIES LINK_FLAGS
# (a training binary puts TRAIN_MAIN_LIBRARY, which holds main(), first).
${lines}RUNTIME_LIBRARIES=$<TARGET_FILE:SharcRuntime> $<TARGET_FILE:SharcRuntimeIO>
TRAIN_MAIN_LIBRARY=$<$<TARGET_EXISTS:SharcTrainMain>:$<TARGET_FILE:SharcTrainMain>>
")
