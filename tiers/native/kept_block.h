/* Scratch memory for a kernel call's activations that stays with the calling thread: a decode step makes ~100 calls
 * of each kernel, and allocating their arrays every call, right after the last call's weights had streamed through
 * the caches, cost microseconds a call (kquant.c). A block of up to KEPT_BLOCK_MAX bytes is kept for the thread's
 * next call and freed when the thread ends; a larger one (a long prompt's rows) is the caller's to free. Each file
 * that includes this keeps its own block. */
#ifndef AIO_KEPT_BLOCK_H
#define AIO_KEPT_BLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define KEPT_BLOCK_MAX ((size_t)1 << 20)

typedef struct {
    void *block;
    size_t bytes;
} kept_block_slot;

static pthread_key_t kept_block_key;
static int kept_block_key_made; /* 0 when pthread_key_create failed: nothing is kept */
static pthread_once_t kept_block_once = PTHREAD_ONCE_INIT;

static void kept_block_slot_free(void *slot) {
    free(((kept_block_slot *)slot)->block);
    free(slot);
}

static void kept_block_key_create(void) {
    kept_block_key_made = !pthread_key_create(&kept_block_key, kept_block_slot_free);
}

/* a 64-byte-aligned block of at least `bytes`: the thread's kept one (grown when too small), or, above
 * KEPT_BLOCK_MAX or when nothing can be kept, a new one that is the caller's to free (*owned = 1); NULL when memory
 * ran out */
static void *kept_block(size_t bytes, int *owned) {
    *owned = 0;
    if (bytes == 0) bytes = 64; /* a block, not NULL: NULL means out of memory */
    pthread_once(&kept_block_once, kept_block_key_create);
    const int keep = bytes <= KEPT_BLOCK_MAX && kept_block_key_made;
    kept_block_slot *slot = keep ? (kept_block_slot *)pthread_getspecific(kept_block_key) : NULL;
    if (keep && !slot) {
        slot = (kept_block_slot *)calloc(1, sizeof *slot);
        if (slot && pthread_setspecific(kept_block_key, slot)) {
            free(slot);
            slot = NULL;
        }
    }
    if (slot && slot->bytes >= bytes) return slot->block;
    void *block = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (slot && block) {
        free(slot->block);
        slot->block = block;
        slot->bytes = bytes;
    } else {
        *owned = block != NULL;
    }
    return block;
}

/* n arrays in one kept_block, each 64-byte aligned (its size rounded up to 64 bytes): *arrays[i] gets the i-th,
 * of bytes[i]; returns the block (see kept_block for *owned), or NULL when memory ran out */
static void *kept_arrays(int n, void **const *arrays, const int64_t *bytes, int *owned) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)(bytes[i] + 63) / 64 * 64;
    unsigned char *const block = (unsigned char *)kept_block(total, owned);
    unsigned char *at = block;
    for (int i = 0; block && i < n; i++) {
        *arrays[i] = at;
        at += (bytes[i] + 63) / 64 * 64;
    }
    return block;
}

#endif
