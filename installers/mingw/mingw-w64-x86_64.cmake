# CMake toolchain for a Windows x86-64 cross-build with Debian's MinGW-w64 (the posix thread model: llama.cpp
# needs std::thread, which GCC 12's win32 model lacks). Used by installers/windows_cross.py.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(CMAKE_C_COMPILER x86_64-w64-mingw32-gcc-posix)
set(CMAKE_CXX_COMPILER x86_64-w64-mingw32-g++-posix)
set(CMAKE_RC_COMPILER x86_64-w64-mingw32-windres)
set(CMAKE_FIND_ROOT_PATH /usr/x86_64-w64-mingw32)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# The GCC runtime is NOT linked statically: a static libgcc in each DLL makes ggml-base.dll export _Unwind_Resume,
# which ggml-cpu.dll's own static copy then clashes with. libgcc_s_seh-1.dll, libstdc++-6.dll and
# libwinpthread-1.dll are copied beside the DLLs instead (windows_cross.RUNTIME_DLLS).
