#ifndef NH_BUILD_INFO_H
#define NH_BUILD_INFO_H

/// The git commit this build was made from ("" when it was not stamped): `make` writes it to
/// build_stamp.h beside build_info.c before each build, so only this file is compiled again.
const char *nh_build_commit(void);

#endif
