// Counts the heap allocations of a process, for scripts/bench-allocations. Loaded with
// LD_PRELOAD, it stands in for glibc's allocation functions (which glibc allows), counts each
// call, and hands it to glibc's own implementation. At exit it writes the count to the file
// named by MP_ALLOCATION_COUNT_FILE.

#define _GNU_SOURCE
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *pointer, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void __libc_free(void *pointer);

static atomic_ulong allocations;

static void counted(void) { atomic_fetch_add_explicit(&allocations, 1, memory_order_relaxed); }

void *malloc(size_t size) { counted(); return __libc_malloc(size); }
void *calloc(size_t count, size_t size) { counted(); return __libc_calloc(count, size); }
void *realloc(void *pointer, size_t size) {
    // realloc(NULL, n) is an allocation; resizing one is counted too, as a new block may be made.
    counted();
    return __libc_realloc(pointer, size);
}
void *memalign(size_t alignment, size_t size) { counted(); return __libc_memalign(alignment, size); }
void *aligned_alloc(size_t alignment, size_t size) { counted(); return __libc_memalign(alignment, size); }
int posix_memalign(void **result, size_t alignment, size_t size) {
    if (alignment < sizeof(void *) || (alignment & (alignment - 1)) != 0) return 22;  // EINVAL
    counted();
    void *pointer = __libc_memalign(alignment, size);
    if (pointer == NULL && size != 0) return 12;  // ENOMEM
    *result = pointer;
    return 0;
}
void free(void *pointer) { __libc_free(pointer); }

__attribute__((destructor)) static void report(void) {
    const char *path = getenv("MP_ALLOCATION_COUNT_FILE");
    if (path == NULL) return;
    FILE *file = fopen(path, "w");
    if (file == NULL) return;
    fprintf(file, "%lu\n", atomic_load(&allocations));
    fclose(file);
}
