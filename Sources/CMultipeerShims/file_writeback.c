// Write-back control for files received as resources: glibc declares sync_file_range only
// under _GNU_SOURCE, which Swift's Glibc module does not set.

#define _GNU_SOURCE
#include <fcntl.h>
#include "CMultipeerShims.h"

int mp_start_write_back(int descriptor, long long offset, long long length) {
#if defined(__linux__)
    return sync_file_range(descriptor, offset, length, SYNC_FILE_RANGE_WRITE);
#else
    (void)descriptor; (void)offset; (void)length;
    return 0;
#endif
}

int mp_finish_write_back(int descriptor, long long offset, long long length) {
#if defined(__linux__)
    return sync_file_range(descriptor, offset, length,
                           SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
#else
    (void)descriptor; (void)offset; (void)length;
    return 0;
#endif
}
