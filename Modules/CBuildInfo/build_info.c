#include "build_info.h"

#if __has_include("build_stamp.h")
#include "build_stamp.h"
#endif

#ifndef NH_BUILD_COMMIT
#define NH_BUILD_COMMIT ""
#endif

const char *nh_build_commit(void) { return NH_BUILD_COMMIT; }
