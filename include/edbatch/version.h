// edbatch's version (semantic versioning; before 1.0 a minor release may break the API). The
// build checks that these numbers match project(VERSION) in CMakeLists.txt.
#pragma once

#define EDBATCH_VERSION_MAJOR 0
#define EDBATCH_VERSION_MINOR 1
#define EDBATCH_VERSION_PATCH 0
#define EDBATCH_VERSION_STRING "0.1.0"
// One number to compare against: 10000 * major + 100 * minor + patch.
#define EDBATCH_VERSION (EDBATCH_VERSION_MAJOR * 10000 + EDBATCH_VERSION_MINOR * 100 + EDBATCH_VERSION_PATCH)
