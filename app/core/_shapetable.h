/*
 * The shape table: open-addressing hash map of shape hashes to values (filter rule index and
 * flags, or a kept slot id), and the set of 64-bit keys the kept slots use. Included by
 * _shapescan.c (one translation unit), after Python.h and _shapehash.h.
 */
#ifndef LOGDX_SHAPETABLE_H
#define LOGDX_SHAPETABLE_H

#define FLAG_EXTRACT 0x10000
#define FLAG_PROGRESS 0x20000
#define FLAG_PREFIX 0x40000 /* a \r segment that is only a launcher prefix: no shape of its own */
#define FLAG_KEEP 0x40000000
/* a kept shape whose lines carry a metric series / a step counter the format-free reader found
 * (app/core/signals.py): sampled / tracked as progress like the droppable shapes' flags */
#define FLAG_KEEP_EXTRACT 0x01000000
#define FLAG_KEEP_PROGRESS 0x02000000
#define VALUE_MASK 0xFFFF
#define KEEP_MASK 0xFFFFFF
#define LAST_PROGRESS 4
#define MAX_VARIANTS (1 << 18)
#define MAX_SAMPLES 256 /* per scan call: past it, every other sample is dropped */

typedef struct {
    uint64_t count; /* lines counted here (never seen by Python) */
    int64_t last;   /* line number of the last of them, 0 = none */
    Py_ssize_t last_a, last_b; /* its span in the buffer of the current scan (see save_touched) */
    unsigned char *text; /* a copy of the last counted line of an earlier buffer (save_touched) */
    size_t text_len, text_cap;
    int64_t text_line;
    int32_t lo1, hi1, lo2, hi2; /* shape-position ranges of the variant fields (lo > hi: none) */
    int32_t hdigit; /* the host starts with a digit (an address): at its first digit run, not at
                       the letter before lo2 */
    uint32_t *ranks; /* the ranks and host ids seen on its lines (at most max_members each) */
    uint32_t *hosts;
    uint32_t nranks, capranks, nhosts, caphosts;
    int touched;    /* counted a line of the buffer being scanned */
} KeepSlot;

typedef struct {
    uint64_t key; /* 0 = empty */
    int32_t val;
} Slot;

typedef struct { /* an open-addressing set of non-zero 64-bit keys */
    uint64_t *keys;
    size_t cap, used;
} U64Set;

typedef struct {
    PyObject_HEAD
    Slot *slots;
    size_t cap; /* power of two */
    size_t used;
    uint64_t *counts; /* per rule index */
    size_t ncounts;
    KeepSlot *keep;
    size_t nkeep, keepcap;
    U64Set variants; /* hashes of the (slot, field values) already seen */
    size_t *touched; /* slots counted in the current buffer, for save_touched */
    size_t ntouched, touchedcap;
    U64Set pairs;   /* (slot, rank) and (slot, host id) already recorded */
    U64Set ranks;   /* every rank seen on a kept line, + 1 */
    U64Set hostkeys; /* hashes of the host names seen ... */
    uint32_t *hostids; /* ... and their ids, at the same positions */
    unsigned char **host_bytes; /* the host names, by id */
    Py_ssize_t *host_len;
    size_t nhostnames, hostnamecap;
    uint32_t max_members;
} ShapeTable;

static int record_variant(ShapeTable *t, size_t slot, const unsigned char *p, const unsigned char *end);

/* 1: the key was new and is now in the set, 0: already there, -1: no memory. `ids`, when given, is
 * an array kept parallel to the keys (grown and rehashed with them). */
static int set_insert_at(U64Set *set, uint64_t key, uint32_t **ids, size_t *where) {
    if ((set->used + 1) * 2 > set->cap) {
        size_t ncap = set->cap ? set->cap * 2 : 256;
        uint64_t *nk = PyMem_RawCalloc(ncap, sizeof(uint64_t));
        uint32_t *ni = ids ? PyMem_RawCalloc(ncap, sizeof(uint32_t)) : NULL;
        if (!nk || (ids && !ni)) {
            PyMem_RawFree(nk);
            PyMem_RawFree(ni);
            return -1;
        }
        for (size_t i = 0; i < set->cap; i++) {
            if (!set->keys[i]) continue;
            size_t j = set->keys[i] & (ncap - 1);
            while (nk[j]) j = (j + 1) & (ncap - 1);
            nk[j] = set->keys[i];
            if (ids) ni[j] = (*ids)[i];
        }
        PyMem_RawFree(set->keys);
        set->keys = nk;
        set->cap = ncap;
        if (ids) {
            PyMem_RawFree(*ids);
            *ids = ni;
        }
    }
    size_t j = key & (set->cap - 1);
    while (set->keys[j]) {
        if (set->keys[j] == key) {
            if (where) *where = j;
            return 0;
        }
        j = (j + 1) & (set->cap - 1);
    }
    set->keys[j] = key;
    set->used++;
    if (where) *where = j;
    return 1;
}

static inline int set_insert(U64Set *set, uint64_t key) { return set_insert_at(set, key, NULL, NULL); }

static int table_grow(ShapeTable *t) {
    size_t ncap = t->cap ? t->cap * 2 : 1024;
    Slot *ns = PyMem_RawCalloc(ncap, sizeof(Slot));
    if (!ns) return -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->slots[i].key) continue;
        size_t j = t->slots[i].key & (ncap - 1);
        while (ns[j].key) j = (j + 1) & (ncap - 1);
        ns[j] = t->slots[i];
    }
    PyMem_RawFree(t->slots);
    t->slots = ns;
    t->cap = ncap;
    return 0;
}

static inline int32_t table_get(const ShapeTable *t, uint64_t key) {
    size_t j = key & (t->cap - 1);
    while (t->slots[j].key) {
        if (t->slots[j].key == key) return t->slots[j].val;
        j = (j + 1) & (t->cap - 1);
    }
    return -1;
}

static int table_put(ShapeTable *t, uint64_t key, int32_t val) {
    if ((t->used + 1) * 2 > t->cap && table_grow(t) < 0) return -1;
    size_t j = key & (t->cap - 1);
    while (t->slots[j].key && t->slots[j].key != key) j = (j + 1) & (t->cap - 1);
    if (!t->slots[j].key) t->used++;
    t->slots[j].key = key;
    t->slots[j].val = val;
    return 0;
}


#endif
