/*
 * s3_xml.c — S3's XML responses read with libexpat (s3_internal.h): the
 * two levels below the root that every S3 result uses (fields of the
 * result, records such as <Contents> and their fields).
 *
 * The server is not trusted: a document type declaration (S3 never sends
 * one; it is where entities are declared: the "billion laughs" and external
 * entities) stops the parse, as does nesting deeper than MAX_DEPTH; expat
 * never loads anything external (no handler for it is set), and its own
 * amplification limits stay on.  The body's size is bounded by the caller
 * (cks3_req.max_body), each text kept to MAX_TEXT.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <expat.h>

#include "s3_internal.h"

#define MAX_NAME 64
#define MAX_TEXT (64u << 10)       /* longest text kept (a key is at most 1 KiB) */
#define MAX_DEPTH 32               /* S3's results are 3 deep */

typedef struct {
    XML_Parser p;
    int depth;
    char names[4][MAX_NAME];       /* names[d]: the open element of depth d (1..3) */
    int children[4];               /* the open element of depth d has children */
    char *text;
    size_t n;
    int over;
    char *root;
    size_t root_cap;
    cks3_xml_cb cb;
    void *arg;
    int rc;
    int refused;                   /* a DOCTYPE, an entity declaration, too deep */
} walker;

/* "ns:Name" and "uri Name" (namespaces) both give "Name". */
static const char *local_name(const char *n)
{
    const char *s = strrchr(n, ' ');
    s = s ? s + 1 : n;
    const char *c = strrchr(s, ':');
    return c ? c + 1 : s;
}

/* A <!DOCTYPE ...>: refused (stops the parse: XML_Parse fails). */
static void XMLCALL on_doctype(void *ud, const XML_Char *name, const XML_Char *sysid, const XML_Char *pubid,
                               int internal)
{
    walker *w = ud;
    (void)name, (void)sysid, (void)pubid, (void)internal;
    w->refused = 1;
    XML_StopParser(w->p, XML_FALSE);
}

static void XMLCALL on_entity(void *ud, const XML_Char *name, int param, const XML_Char *value, int len,
                              const XML_Char *base, const XML_Char *sysid, const XML_Char *pubid,
                              const XML_Char *notation)
{
    (void)name, (void)param, (void)value, (void)len, (void)base, (void)sysid, (void)pubid, (void)notation;
    on_doctype(ud, NULL, NULL, NULL, 0);
}

static void XMLCALL on_start(void *ud, const XML_Char *name, const XML_Char **atts)
{
    walker *w = ud;
    (void)atts;
    if (w->depth >= MAX_DEPTH) {
        on_doctype(ud, NULL, NULL, NULL, 0);
        return;
    }
    if (w->depth >= 1 && w->depth <= 3)
        w->children[w->depth] = 1;
    w->depth++;
    if (w->depth == 1 && w->root)
        snprintf(w->root, w->root_cap, "%s", local_name(name));
    if (w->depth <= 3) {
        snprintf(w->names[w->depth], MAX_NAME, "%s", local_name(name));
        w->children[w->depth] = 0;
    }
    w->n = 0;
    w->over = 0;
}

static void XMLCALL on_text(void *ud, const XML_Char *s, int len)
{
    walker *w = ud;
    if (w->depth < 2 || w->depth > 3 || len <= 0)
        return;
    if (w->n + (size_t)len > MAX_TEXT) {
        w->over = 1;
        return;
    }
    memcpy(w->text + w->n, s, (size_t)len);
    w->n += (size_t)len;
}

static void XMLCALL on_end(void *ud, const XML_Char *name)
{
    walker *w = ud;
    (void)name;
    if (w->refused)
        return;
    int d = w->depth--;
    if (w->rc || d < 2 || d > 3)
        return;
    w->text[w->over ? 0 : w->n] = 0;
    if (d == 2 && w->children[2])
        w->rc = w->cb(w->arg, w->names[2], NULL, NULL);
    else if (d == 2)
        w->rc = w->cb(w->arg, NULL, w->names[2], w->text);
    else if (!w->children[3])
        w->rc = w->cb(w->arg, w->names[2], w->names[3], w->text);
    w->n = 0;
    if (w->rc)
        XML_StopParser(w->p, XML_FALSE);
}

int cks3_xml_walk(const char *xml, size_t len, char *root, size_t rootCap, cks3_xml_cb cb, void *arg)
{
    walker w;
    memset(&w, 0, sizeof w);
    if (root && rootCap)
        root[0] = 0;
    w.root = root;
    w.root_cap = rootCap;
    w.cb = cb;
    w.arg = arg;
    w.text = malloc(MAX_TEXT + 1);
    w.p = XML_ParserCreate(NULL);
    if (!w.text || !w.p) {
        free(w.text);
        if (w.p)
            XML_ParserFree(w.p);
        return -1;
    }
    XML_SetUserData(w.p, &w);
    XML_SetElementHandler(w.p, on_start, on_end);
    XML_SetCharacterDataHandler(w.p, on_text);
    XML_SetStartDoctypeDeclHandler(w.p, on_doctype);
    XML_SetEntityDeclHandler(w.p, on_entity);
    XML_SetParamEntityParsing(w.p, XML_PARAM_ENTITY_PARSING_NEVER);
    int ok = len <= (size_t)INT_MAX && XML_Parse(w.p, xml, (int)len, XML_TRUE) == XML_STATUS_OK && !w.refused;
    int rc = w.refused ? -1 : w.rc ? w.rc : ok ? 0 : -1;
    XML_ParserFree(w.p);
    free(w.text);
    return rc;
}
