# The Python module's dependencies: an interpreter with its development headers and pybind11 (Debian:
# python3-dev, pybind11-dev). EDB_PYTHON=AUTO builds the module when both are found, ON fails the
# configure when one is missing, OFF skips it. Sets EDB_BUILD_PYTHON and EDB_PYTHON_INSTALL_DIR.
set(EDB_BUILD_PYTHON OFF)
if(NOT EDB_PYTHON MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "EDB_PYTHON must be AUTO, ON or OFF, not '${EDB_PYTHON}'")
endif()
if(NOT EDB_PYTHON STREQUAL "OFF")
  # Unless Python_EXECUTABLE names one, the first python3 on PATH (then /usr/bin) that imports
  # numpy, which the module needs at run time (a pyenv shim ahead of Debian's python3 may lack it).
  if(NOT Python_EXECUTABLE)
    string(REPLACE ":" ";" edb_path_dirs "$ENV{PATH}")
    foreach(dir IN LISTS edb_path_dirs ITEMS /usr/bin)
      if(EXISTS "${dir}/python3")
        execute_process(COMMAND "${dir}/python3" -c "import numpy" RESULT_VARIABLE edb_numpy_missing
          OUTPUT_QUIET ERROR_QUIET)
        if(edb_numpy_missing EQUAL 0)
          set(Python_EXECUTABLE "${dir}/python3" CACHE FILEPATH "The interpreter the Python module is built for")
          break()
        endif()
      endif()
    endforeach()
  endif()
  find_package(Python 3.8 COMPONENTS Interpreter Development.Module QUIET)
  if(Python_FOUND)
    set(PYBIND11_FINDPYTHON ON)
    find_package(pybind11 2.6 CONFIG QUIET)
  endif()
  if(Python_FOUND AND pybind11_FOUND)
    set(EDB_BUILD_PYTHON ON)
    # Where `cmake --install` puts the module, relative to the prefix: Debian's interpreter reads
    # lib/python3/dist-packages (its deb_system scheme), others their posix_prefix site-packages.
    execute_process(COMMAND "${Python_EXECUTABLE}" -c [=[
import sysconfig
scheme = 'deb_system' if 'deb_system' in sysconfig.get_scheme_names() else 'posix_prefix'
print(sysconfig.get_path('platlib', scheme, vars={'base': '', 'platbase': ''}).lstrip('/'), end='')
]=] OUTPUT_VARIABLE edb_site_packages RESULT_VARIABLE edb_site_failed)
    if(edb_site_failed OR edb_site_packages STREQUAL "")
      set(edb_site_packages "lib/python${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}/site-packages")
    endif()
    set(EDB_PYTHON_INSTALL_DIR "${edb_site_packages}" CACHE STRING
      "Where the Python module is installed, relative to the install prefix")
    message(STATUS "Python module: ${Python_EXECUTABLE} (${Python_VERSION}), pybind11 ${pybind11_VERSION}; "
                   "installs into <prefix>/${EDB_PYTHON_INSTALL_DIR}")
  elseif(EDB_PYTHON STREQUAL "ON")
    if(NOT Python_FOUND)
      message(FATAL_ERROR "EDB_PYTHON=ON but no Python 3 interpreter with development headers was found "
                          "(Debian: apt-get install python3-dev; or set Python_EXECUTABLE)")
    endif()
    message(FATAL_ERROR "EDB_PYTHON=ON but pybind11 was not found (Debian: apt-get install pybind11-dev; "
                        "or set pybind11_DIR)")
  else()
    message(STATUS "Python module: not built (needs Python 3 with headers and pybind11; EDB_PYTHON=ON to require them)")
  endif()
endif()
