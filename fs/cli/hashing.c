/*
 * hashing.c — SHA-256 of sources and of decoded files (OpenSSL's libcrypto),
 * one-shot and as a pipe on a thread of its own.
 */
#include "hashing.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct cku_sha256 {
    EVP_MD_CTX *ctx;
};

cku_sha256 *cku_sha256_new(void)
{
    cku_sha256 *s = malloc(sizeof *s);
    if (!s)
        return NULL;
    s->ctx = EVP_MD_CTX_new();
    if (!s->ctx || !EVP_DigestInit_ex(s->ctx, EVP_sha256(), NULL)) {
        EVP_MD_CTX_free(s->ctx);
        free(s);
        return NULL;
    }
    return s;
}

void cku_sha256_update(cku_sha256 *s, const void *p, size_t n) { EVP_DigestUpdate(s->ctx, p, n); }

void cku_sha256_final(cku_sha256 *s, uint8_t out[32])
{
    unsigned len = 32;
    EVP_DigestFinal_ex(s->ctx, out, &len);
    EVP_MD_CTX_free(s->ctx);
    free(s);
}

#define PIPE_BUFS 3

struct cku_sha256_pipe {
    pthread_mutex_t lock;
    pthread_cond_t cv;           /* a buffer was queued or hashed, or final */
    uint8_t *buf[PIPE_BUFS];
    size_t len[PIPE_BUFS];
    unsigned head, queued;       /* buffers head .. head+queued-1 wait for the hasher (by lock) */
    int done;                    /* final was called (by lock) */
    int threaded;
    pthread_t th;
    cku_sha256 *sha;
};

static void *pipe_main(void *arg)
{
    cku_sha256_pipe *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->queued && !p->done)
            pthread_cond_wait(&p->cv, &p->lock);
        if (!p->queued)
            break;
        unsigned i = p->head;
        pthread_mutex_unlock(&p->lock);
        cku_sha256_update(p->sha, p->buf[i], p->len[i]);
        pthread_mutex_lock(&p->lock);
        p->head = (i + 1) % PIPE_BUFS;
        p->queued--;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

cku_sha256_pipe *cku_sha256_pipe_new(size_t bufSize)
{
    cku_sha256_pipe *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->sha = cku_sha256_new();
    int ok = p->sha != NULL;
    for (int i = 0; i < PIPE_BUFS; i++)
        ok = ok && (p->buf[i] = malloc(bufSize ? bufSize : 1)) != NULL;
    if (!ok) {
        for (int i = 0; i < PIPE_BUFS; i++)
            free(p->buf[i]);
        if (p->sha) {
            uint8_t d[32];
            cku_sha256_final(p->sha, d);
        }
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threaded = pthread_create(&p->th, NULL, pipe_main, p) == 0; /* else: hashed on submit */
    return p;
}

uint8_t *cku_sha256_pipe_buffer(cku_sha256_pipe *p)
{
    pthread_mutex_lock(&p->lock);
    while (p->queued == PIPE_BUFS)
        pthread_cond_wait(&p->cv, &p->lock);
    uint8_t *b = p->buf[(p->head + p->queued) % PIPE_BUFS];
    pthread_mutex_unlock(&p->lock);
    return b;
}

void cku_sha256_pipe_submit(cku_sha256_pipe *p, size_t len)
{
    pthread_mutex_lock(&p->lock);
    unsigned i = (p->head + p->queued) % PIPE_BUFS;
    p->len[i] = len;
    if (p->threaded) {
        p->queued++;
        pthread_cond_broadcast(&p->cv);
    } else {
        cku_sha256_update(p->sha, p->buf[i], len);
        p->head = (i + 1) % PIPE_BUFS;
    }
    pthread_mutex_unlock(&p->lock);
}

void cku_sha256_pipe_final(cku_sha256_pipe *p, uint8_t out[32])
{
    if (p->threaded) {
        pthread_mutex_lock(&p->lock);
        p->done = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->lock);
        pthread_join(p->th, NULL);
    }
    cku_sha256_final(p->sha, out);
    for (int i = 0; i < PIPE_BUFS; i++)
        free(p->buf[i]);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

