/*
 * hashing.h — SHA-256 (OpenSSL's libcrypto) for the commands: of sources
 * while packing, of decoded files while unpacking and verifying.
 */
#ifndef CKU_HASHING_H
#define CKU_HASHING_H

#include <stddef.h>
#include <stdint.h>

/* SHA-256, incremental. */
typedef struct cku_sha256 cku_sha256;
cku_sha256 *cku_sha256_new(void);
void cku_sha256_update(cku_sha256 *s, const void *p, size_t n);
void cku_sha256_final(cku_sha256 *s, uint8_t out[32]); /* also frees s */

/* SHA-256 on a thread of its own, fed in order through a few rotating
 * buffers, so that producing the bytes (decoding, writing) and hashing them
 * overlap.  Use: b = cku_sha256_pipe_buffer(p) (waits for a free one), put up
 * to bufSize bytes in it, cku_sha256_pipe_submit(p, len); repeat; then
 * cku_sha256_pipe_final(p, out), which also frees p.  One producer thread. */
typedef struct cku_sha256_pipe cku_sha256_pipe;
cku_sha256_pipe *cku_sha256_pipe_new(size_t bufSize); /* NULL when out of memory */
uint8_t *cku_sha256_pipe_buffer(cku_sha256_pipe *p);
void cku_sha256_pipe_submit(cku_sha256_pipe *p, size_t len);
void cku_sha256_pipe_final(cku_sha256_pipe *p, uint8_t out[32]);
#endif
