/*
 * Shape scanner: the hot loop of log compression.
 *
 * A line's *shape* is the line with its ASCII digits deleted. ShapeTable holds the 64-bit hashes
 * of the shapes already judged droppable, each with a small integer value (the filter rule index
 * and two flags). `scan(chunk)` walks a chunk line by line without creating Python objects for
 * dropped lines: it counts drops per value and reports only
 *   - the lines whose shape is not in the table (survivors) as (index, start, end) triples,
 *   - every k-th line whose value carries the EXTRACT flag (metric samples),
 *   - the last LAST_PROGRESS lines whose value carries the PROGRESS flag.
 * Shapes judged *kept* (plain lines of a known template, no error in them) are in the table too,
 * with the KEEP flag and a slot id: their lines are counted per slot (count, last line) here, and
 * only the rank and host of a line whose rank/host fields carry values not seen before for that
 * slot (a *variant*) go back to Python, so that a template's rank and host sets stay complete.
 * Lines of a `\r`-redrawn progress bar are dropped here when every segment's shape is known. The fields are
 * ranges of shape positions (the number of non-digit bytes before a digit run), learned by the
 * Python side from the shape's first line.
 * `scan_from` stops after a given number of new-shape lines, so that the Python side judges the new
 * shapes and resumes: lines of a shape learned in the middle of a chunk are then dropped or
 * counted here, not in Python.
 * The Python side (app/core/compressor.py) judges new shapes with the rules and adds them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_shapehash.h"

#define FLAG_EXTRACT 0x10000
#define FLAG_PROGRESS 0x20000
#define FLAG_PREFIX 0x40000 /* a \r segment that is only a launcher prefix: no shape of its own */
#define FLAG_KEEP 0x40000000
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

/* Hash of the digit runs whose shape position lies in [lo1,hi1] or [lo2,hi2], mixed with the
 * slot id: two lines of a slot with the same key have the same rank/host field values. */
static uint64_t variant_hash(const KeepSlot *ks, uint64_t slot, const unsigned char *p,
                             const unsigned char *end) {
    uint64_t h = mix64(slot + 0x51ED27ULL);
    int32_t maxhi = ks->hi1 > ks->hi2 ? ks->hi1 : ks->hi2;
    int32_t pos = 0;
    while (p < end && pos <= maxhi) {
        unsigned char c = *p++;
        if ((unsigned)(c - '0') >= 10u) {
            pos++;
            continue;
        }
        if ((pos >= ks->lo1 && pos <= ks->hi1) || (pos >= ks->lo2 && pos <= ks->hi2))
            h = (h ^ ((uint64_t)c | ((uint64_t)(uint32_t)pos << 8))) * 0x100000001B3ULL;
    }
    h = mix64(h);
    return h ? h : 1;
}

/* 1: the key was new and is now in the set; 0: already there, or the set is full; -1: no memory */
static int variants_insert(ShapeTable *t, uint64_t key) {
    if (t->variants.used >= MAX_VARIANTS) return 0;
    return set_insert(&t->variants, key);
}

/* A line of a kept shape, counted here: 1 when Python must record its rank/host (a new variant),
 * 0 when not, -1 out of memory. */
static inline int keep_line(ShapeTable *t, int32_t v, const unsigned char *p, const unsigned char *end,
                            int64_t line_no, Py_ssize_t a, Py_ssize_t b) {
    size_t slot = (size_t)(v & KEEP_MASK);
    KeepSlot *ks = &t->keep[slot];
    int r = variants_insert(t, variant_hash(ks, slot, p, end));
    if (r < 0) return r;
    ks->count++;
    ks->last = line_no;
    if (a >= 0) { /* a line of the scanned buffer: Python reads its text before the buffer goes */
        if (!ks->touched) {
            if (t->ntouched == t->touchedcap) {
                size_t ncap = t->touchedcap ? t->touchedcap * 2 : 64;
                size_t *nt = PyMem_RawRealloc(t->touched, ncap * sizeof(size_t));
                if (!nt) return -1;
                t->touched = nt;
                t->touchedcap = ncap;
            }
            t->touched[t->ntouched++] = slot;
            ks->touched = 1;
        }
        ks->last_a = a;
        ks->last_b = b;
    }
    return r;
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

static int ShapeTable_init(ShapeTable *self, PyObject *args, PyObject *kwds) {
    Py_ssize_t nrules = 0, max_members = 512;
    static char *kwlist[] = {"nrules", "max_members", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n|n", kwlist, &nrules, &max_members)) return -1;
    if (max_members < 0 || max_members > (1 << 20)) {
        PyErr_SetString(PyExc_ValueError, "max_members out of range");
        return -1;
    }
    self->max_members = (uint32_t)max_members;
    if (nrules < 0 || nrules > VALUE_MASK) {
        PyErr_SetString(PyExc_ValueError, "nrules out of range");
        return -1;
    }
    self->ncounts = (size_t)nrules;
    self->counts = PyMem_RawCalloc(nrules ? nrules : 1, sizeof(uint64_t));
    if (!self->counts || table_grow(self) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void ShapeTable_dealloc(ShapeTable *self) {
    PyMem_RawFree(self->touched);
    for (size_t i = 0; i < self->nkeep; i++) {
        PyMem_RawFree(self->keep[i].text);
        PyMem_RawFree(self->keep[i].ranks);
        PyMem_RawFree(self->keep[i].hosts);
    }
    PyMem_RawFree(self->pairs.keys);
    PyMem_RawFree(self->ranks.keys);
    PyMem_RawFree(self->hostkeys.keys);
    PyMem_RawFree(self->hostids);
    for (size_t i = 0; i < self->nhostnames; i++) PyMem_RawFree(self->host_bytes[i]);
    PyMem_RawFree(self->host_bytes);
    PyMem_RawFree(self->host_len);
    PyMem_RawFree(self->keep);
    PyMem_RawFree(self->variants.keys);
    PyMem_RawFree(self->slots);
    PyMem_RawFree(self->counts);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *ShapeTable_add(ShapeTable *self, PyObject *args) {
    Py_buffer line;
    int rule, extract = 0, progress = 0;
    if (!PyArg_ParseTuple(args, "y*i|pp", &line, &rule, &extract, &progress)) return NULL;
    if (rule < 0 || (size_t)rule >= self->ncounts) {
        PyBuffer_Release(&line);
        PyErr_SetString(PyExc_ValueError, "rule index out of range");
        return NULL;
    }
    const unsigned char *p = line.buf;
    uint64_t key = shape_hash(p, p + line.len);
    PyBuffer_Release(&line);
    if (table_put(self, key, rule | (extract ? FLAG_EXTRACT : 0) | (progress ? FLAG_PROGRESS : 0)) < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* add_prefix(segment): a \r segment of this shape is only a launcher prefix (skipped like a
 * blank one in \r lines; a whole line of this shape is still judged by Python) */
static PyObject *ShapeTable_add_prefix(ShapeTable *self, PyObject *args) {
    Py_buffer line;
    if (!PyArg_ParseTuple(args, "y*", &line)) return NULL;
    const unsigned char *p = line.buf;
    uint64_t key = shape_hash(p, p + line.len);
    PyBuffer_Release(&line);
    if (table_get(self, key) < 0 && table_put(self, key, FLAG_PREFIX) < 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* add_keep(line, lo1, hi1, lo2, hi2, host_digit=0) -> slot id: the line's shape is kept and counted here; the
 * line's own variant is remembered (Python has just processed it). */
static PyObject *ShapeTable_add_keep(ShapeTable *self, PyObject *args) {
    Py_buffer line;
    int lo1, hi1, lo2, hi2, hdigit = 0;
    if (!PyArg_ParseTuple(args, "y*iiii|i", &line, &lo1, &hi1, &lo2, &hi2, &hdigit)) return NULL;
    const unsigned char *p = line.buf, *end = p + line.len;
    if (self->nkeep > KEEP_MASK) {
        PyBuffer_Release(&line);
        PyErr_SetString(PyExc_OverflowError, "too many kept shapes");
        return NULL;
    }
    if (self->nkeep == self->keepcap) {
        size_t ncap = self->keepcap ? self->keepcap * 2 : 256;
        KeepSlot *nk = PyMem_RawRealloc(self->keep, ncap * sizeof(KeepSlot));
        if (!nk) {
            PyBuffer_Release(&line);
            return PyErr_NoMemory();
        }
        self->keep = nk;
        self->keepcap = ncap;
    }
    size_t slot = self->nkeep++;
    KeepSlot *ks = &self->keep[slot];
    ks->count = 0;
    ks->last = 0;
    ks->last_a = ks->last_b = 0;
    ks->touched = 0;
    ks->text = NULL;
    ks->text_len = ks->text_cap = 0;
    ks->text_line = 0;
    ks->ranks = NULL;
    ks->hosts = NULL;
    ks->nranks = ks->capranks = ks->nhosts = ks->caphosts = 0;
    ks->lo1 = lo1;
    ks->hi1 = hi1;
    ks->lo2 = lo2;
    ks->hi2 = hi2;
    ks->hdigit = hdigit ? 1 : 0;
    uint64_t key = shape_hash(p, end);
    int r = variants_insert(self, variant_hash(ks, slot, p, end));
    PyBuffer_Release(&line);
    if (r < 0 || table_put(self, key, FLAG_KEEP | (int32_t)slot) < 0) return PyErr_NoMemory();
    return PyLong_FromSize_t(slot);
}

/* probe_keep(line, line_no) -> -1: not a kept shape; 0: counted here (a new rank/host recorded
 * here too). For lines a scan handed back before their shape was learned. */
static PyObject *ShapeTable_probe_keep(ShapeTable *self, PyObject *args) {
    Py_buffer line;
    long long line_no;
    if (!PyArg_ParseTuple(args, "y*L", &line, &line_no)) return NULL;
    const unsigned char *p = line.buf, *end = p + line.len;
    int32_t v = table_get(self, shape_hash(p, end));
    int r = -1;
    if (v >= 0 && (v & FLAG_KEEP)) {
        r = keep_line(self, v, p, end, line_no, -1, -1);
        if (r < 0) {
            PyBuffer_Release(&line);
            return PyErr_NoMemory();
        }
        if (r == 1 && record_variant(self, (size_t)(v & KEEP_MASK), p, end) < 0) {
            PyBuffer_Release(&line);
            return PyErr_NoMemory();
        }
        r = 0;
    }
    PyBuffer_Release(&line);
    return PyLong_FromLong(r);
}

/* save_touched(buffer): copy the last counted line of each slot that counted lines of this
 * buffer (the one just scanned, about to be reused) into the slot, up to TEXT_CAP bytes. */
#define TEXT_CAP 65536
static PyObject *ShapeTable_save_touched(ShapeTable *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    for (size_t i = 0; i < self->ntouched; i++) {
        KeepSlot *ks = &self->keep[self->touched[i]];
        ks->touched = 0;
        if (ks->last_a < 0 || ks->last_b > buf.len || ks->last_b < ks->last_a) continue;
        size_t n = (size_t)(ks->last_b - ks->last_a);
        if (n > TEXT_CAP) n = TEXT_CAP;
        if (n > ks->text_cap) {
            unsigned char *nt = PyMem_RawRealloc(ks->text, n);
            if (!nt) {
                PyBuffer_Release(&buf);
                return PyErr_NoMemory();
            }
            ks->text = nt;
            ks->text_cap = n;
        }
        memcpy(ks->text, (const unsigned char *)buf.buf + ks->last_a, n);
        ks->text_len = n;
        ks->text_line = ks->last;
    }
    self->ntouched = 0;
    PyBuffer_Release(&buf);
    Py_RETURN_NONE;
}

/* keep_last() -> [(line, text)] per slot: its last counted line saved by save_touched ((0, b"")
 * when none) */
static PyObject *ShapeTable_keep_last(ShapeTable *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = PyList_New((Py_ssize_t)self->nkeep);
    if (!out) return NULL;
    for (size_t i = 0; i < self->nkeep; i++) {
        KeepSlot *ks = &self->keep[i];
        PyObject *t = Py_BuildValue("(Ly#)", (long long)ks->text_line, ks->text ? (const char *)ks->text : "",
                                    (Py_ssize_t)ks->text_len);
        if (!t) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, t);
    }
    return out;
}

/* keep_sets() -> (host names as bytes by id, [(ranks, host ids)] per slot): what record_variant
 * gathered (each list at most max_members long) */
static PyObject *ShapeTable_keep_sets(ShapeTable *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *per = PyList_New((Py_ssize_t)self->nkeep);
    if (!per) return NULL;
    for (size_t i = 0; i < self->nkeep; i++) {
        KeepSlot *ks = &self->keep[i];
        PyObject *ranks = PyList_New(ks->nranks), *hosts = PyList_New(ks->nhosts);
        if (!ranks || !hosts) goto fail_item;
        for (uint32_t k = 0; k < ks->nranks; k++) {
            PyObject *v = PyLong_FromUnsignedLong(ks->ranks[k]);
            if (!v) goto fail_item;
            PyList_SET_ITEM(ranks, k, v);
        }
        for (uint32_t k = 0; k < ks->nhosts; k++) {
            PyObject *v = PyLong_FromUnsignedLong(ks->hosts[k]);
            if (!v) goto fail_item;
            PyList_SET_ITEM(hosts, k, v);
        }
        PyObject *pair = PyTuple_Pack(2, ranks, hosts);
        Py_DECREF(ranks);
        Py_DECREF(hosts);
        if (!pair) goto fail;
        PyList_SET_ITEM(per, (Py_ssize_t)i, pair);
        continue;
    fail_item:
        Py_XDECREF(ranks);
        Py_XDECREF(hosts);
        goto fail;
    }
    PyObject *names = PyList_New((Py_ssize_t)self->nhostnames);
    if (!names) goto fail;
    for (size_t i = 0; i < self->nhostnames; i++) {
        PyObject *name = PyBytes_FromStringAndSize((const char *)self->host_bytes[i], self->host_len[i]);
        if (!name) {
            Py_DECREF(names);
            goto fail;
        }
        PyList_SET_ITEM(names, (Py_ssize_t)i, name);
    }
    PyObject *out = PyTuple_Pack(2, names, per);
    Py_DECREF(names);
    Py_DECREF(per);
    return out;
fail:
    Py_DECREF(per);
    return NULL;
}

/* ranks_seen() -> every rank read from a kept line's variant */
static PyObject *ShapeTable_ranks_seen(ShapeTable *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (size_t i = 0; i < self->ranks.cap; i++) {
        if (!self->ranks.keys[i]) continue;
        PyObject *v = PyLong_FromUnsignedLongLong(self->ranks.keys[i] - 1);
        if (!v || PyList_Append(out, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(v);
    }
    return out;
}

/* keep_counts() -> [(count, last_line)] per slot */
static PyObject *ShapeTable_keep_counts(ShapeTable *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = PyList_New((Py_ssize_t)self->nkeep);
    if (!out) return NULL;
    for (size_t i = 0; i < self->nkeep; i++) {
        PyObject *t = Py_BuildValue("(KL)", (unsigned long long)self->keep[i].count, (long long)self->keep[i].last);
        if (!t) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, t);
    }
    return out;
}

static PyObject *ShapeTable_contains(ShapeTable *self, PyObject *args) {
    Py_buffer line;
    if (!PyArg_ParseTuple(args, "y*", &line)) return NULL;
    const unsigned char *p = line.buf;
    int32_t v = table_get(self, shape_hash(p, p + line.len));
    PyBuffer_Release(&line);
    return PyBool_FromLong(v >= 0 && !(v & (FLAG_KEEP | FLAG_PREFIX)));
}

/* The rank and host span of a line of a kept slot, read at the slot's shape positions (the
 * same as keptshapes.field_values): rank -1 = none (or over 9 digits), host_a -1 = no host. */
static void field_values(const KeepSlot *ks, const unsigned char *p, const unsigned char *end,
                         Py_ssize_t *rank, Py_ssize_t *host_a, Py_ssize_t *host_b) {
    const unsigned char *start = p;
    int32_t maxhi = ks->hi1 > ks->hi2 ? ks->hi1 : ks->hi2;
    int has_host = ks->lo2 <= ks->hi2;
    Py_ssize_t first = ks->hdigit ? ks->lo2 : ks->lo2 - 1; /* shape position of the host's first byte */
    Py_ssize_t pos = 0, digits = 0, ha = -1, hb = -1;
    *rank = -1;
    while (p < end) {
        if ((unsigned)(*p - '0') >= 10u) {
            pos++;
            p++;
            continue;
        }
        const unsigned char *q = p;
        long long value = 0;
        while (q < end && (unsigned)(*q - '0') < 10u) {
            if (q - p < 9) value = value * 10 + (*q - '0');
            q++;
        }
        if (has_host) {
            if (ha < 0 && pos > first - ks->hdigit) ha = first + digits;
            if (hb < 0 && pos > ks->hi2) hb = ks->hi2 + digits;
        }
        if (pos >= ks->lo1 && pos <= ks->hi1) *rank = (q - p) <= 9 ? (Py_ssize_t)value : -1;
        digits += q - p;
        p = q;
        if (pos > maxhi) break;
    }
    if (has_host) {
        Py_ssize_t len = end - start;
        if (ha < 0) ha = first + digits;
        if (hb < 0) hb = ks->hi2 + digits;
        if (ha > len) ha = len;
        if (hb > len) hb = len;
        if (hb < ha) hb = ha;
    }
    *host_a = ha;
    *host_b = hb;
}

/* Append v to a slot's array (grown by doubling up to `max` entries); -1: no memory. */
static int append_u32(uint32_t **arr, uint32_t *n, uint32_t *cap, uint32_t v, uint32_t max) {
    if (*n >= max) return 0;
    if (*n == *cap) {
        uint32_t ncap = *cap ? *cap * 2 : 8;
        if (ncap > max) ncap = max;
        uint32_t *na = PyMem_RawRealloc(*arr, ncap * sizeof(uint32_t));
        if (!na) return -1;
        *arr = na;
        *cap = ncap;
    }
    (*arr)[(*n)++] = v;
    return 0;
}

/* The id of a host name (interned: its bytes are kept once, in host_bytes); -1 out of memory.
 * Called without the GIL: C memory only (keep_sets makes the Python names). */
static Py_ssize_t intern_host(ShapeTable *t, const unsigned char *p, Py_ssize_t len) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (Py_ssize_t i = 0; i < len; i++) h = (h ^ p[i]) * 0x100000001B3ULL;
    h = mix64(h ^ (uint64_t)len);
    h = h ? h : 1;
    size_t where;
    int r = set_insert_at(&t->hostkeys, h, &t->hostids, &where);
    if (r < 0) return -1;
    if (r == 0) return (Py_ssize_t)t->hostids[where];
    if (t->nhostnames == t->hostnamecap) {
        size_t ncap = t->hostnamecap ? t->hostnamecap * 2 : 64;
        unsigned char **nb = PyMem_RawRealloc(t->host_bytes, ncap * sizeof(unsigned char *));
        if (!nb) return -1;
        t->host_bytes = nb;
        Py_ssize_t *nl = PyMem_RawRealloc(t->host_len, ncap * sizeof(Py_ssize_t));
        if (!nl) return -1;
        t->host_len = nl;
        t->hostnamecap = ncap;
    }
    unsigned char *copy = PyMem_RawMalloc(len ? (size_t)len : 1);
    if (!copy) return -1;
    memcpy(copy, p, (size_t)len);
    Py_ssize_t id = (Py_ssize_t)t->nhostnames++;
    t->host_bytes[id] = copy;
    t->host_len[id] = len;
    t->hostids[where] = (uint32_t)id;
    return id;
}

/* A kept line with a new (rank, host) variant: record its rank and host for the slot (and the
 * rank among all ranks seen), so that Python needs no call per variant. -1 out of memory (no
 * exception set: this runs without the GIL). */
static int record_variant(ShapeTable *t, size_t slot, const unsigned char *p, const unsigned char *end) {
    KeepSlot *ks = &t->keep[slot];
    Py_ssize_t rank, ha, hb;
    field_values(ks, p, end, &rank, &ha, &hb);
    if (rank >= 0) {
        if (set_insert(&t->ranks, (uint64_t)rank + 1) < 0) goto nomem;
        if (ks->nranks < t->max_members) {
            int r = set_insert(&t->pairs, mix64(((uint64_t)slot << 32) ^ (uint64_t)rank) | 1);
            if (r < 0 || (r == 1 && append_u32(&ks->ranks, &ks->nranks, &ks->capranks,
                                               (uint32_t)rank, t->max_members) < 0))
                goto nomem;
        }
    }
    if (ha >= 0 && hb > ha) {
        Py_ssize_t id = intern_host(t, p + ha, hb - ha);
        if (id < 0) goto nomem;
        if (ks->nhosts < t->max_members) {
            int r = set_insert(&t->pairs, mix64(((uint64_t)slot << 32) ^ (uint64_t)id ^ 0x5bd1e9955bd1e995ULL) | 1);
            if (r < 0 || (r == 1 && append_u32(&ks->hosts, &ks->nhosts, &ks->caphosts, (uint32_t)id,
                                               t->max_members) < 0))
                goto nomem;
        }
    }
    return 0;
nomem:
    return -1;
}

/* A line with \r in it is a series of segments (a progress bar redrawn in place). When every
 * segment that is not blank has a droppable shape, the line is dropped under the rule of its last
 * segment (the Python side judges a segment exactly like a line: app/core/compressor.py
 * `_cr_line`); the span of the last progress segment, relative to the line, is returned in
 * seg_a/seg_b (-1: none). Returns the last segment's value, or -1 when Python must see the line
 * (a segment of unknown or kept shape, or no segment at all). Blank means the ASCII whitespace
 * that Python's str.strip() removes; anything else, even a Unicode space, is looked up. */
#define CR_LINE_MAX 65536
static int32_t cr_line(const ShapeTable *t, const unsigned char *p, const unsigned char *end,
                       Py_ssize_t *seg_a, Py_ssize_t *seg_b) {
    const unsigned char *line = p;
    int32_t last = -1;
    while (p <= end) {
        const unsigned char *cr = memchr(p, '\r', (size_t)(end - p));
        const unsigned char *seg_end = cr ? cr : end;
        int blank = 1;
        for (const unsigned char *q = p; q < seg_end; q++) {
            unsigned char c = *q;
            if (!(c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f))) {
                blank = 0;
                break;
            }
        }
        if (!blank) {
            int32_t v = table_get(t, shape_hash(p, seg_end));
            if (v >= 0 && (v & FLAG_PREFIX)) goto next; /* "[rank3]:" before the bar's first \r */
            if (v < 0 || (v & FLAG_KEEP)) return -1;
            last = v;
            if (v & FLAG_PROGRESS) {
                *seg_a = p - line;
                *seg_b = seg_end - line;
            }
        }
    next:
        if (!cr) break;
        p = cr + 1;
    }
    return last;
}

/* A growable array of (index, start, end) triples, filled without the GIL. */
typedef struct {
    Py_ssize_t *v;
    size_t n, cap; /* in triples */
} Triples;

static int triples_push(Triples *t, Py_ssize_t i, Py_ssize_t a, Py_ssize_t b) {
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 64;
        Py_ssize_t *nv = PyMem_RawRealloc(t->v, ncap * 3 * sizeof(Py_ssize_t));
        if (!nv) return -1;
        t->v = nv;
        t->cap = ncap;
    }
    Py_ssize_t *slot = t->v + 3 * t->n++;
    slot[0] = i;
    slot[1] = a;
    slot[2] = b;
    return 0;
}

static PyObject *triples_list(const Py_ssize_t *v, size_t n) {
    PyObject *out = PyList_New((Py_ssize_t)n);
    if (!out) return NULL;
    for (size_t k = 0; k < n; k++) {
        PyObject *t = Py_BuildValue("(nnn)", v[3 * k], v[3 * k + 1], v[3 * k + 2]);
        if (!t) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)k, t);
    }
    return out;
}

/* The scan loop over buf[start:]: line indices start at idx0, line numbers (for kept slots) at
 * line0 + index. Stops after max_surv survivors (0: no limit) at the start of the next line.
 * Runs without the GIL (a decoding thread, or the server's other threads, go on meanwhile): it
 * touches only C memory; the Python lists are built after. One thread per table at a time.
 * Returns (end_index, end_offset, survivors, samples, last_progress_lines, n_extract). */
static PyObject *scan_core(ShapeTable *self, Py_buffer *buf, Py_ssize_t start, Py_ssize_t idx0,
                           long long line0, Py_ssize_t every, Py_ssize_t n_extract0, Py_ssize_t max_surv) {
    if (every < 1) every = 1;
    if (start < 0 || start > buf->len) {
        PyErr_SetString(PyExc_ValueError, "start out of range");
        return NULL;
    }
    const unsigned char *base = buf->buf, *p = base + start, *stop = base + buf->len;
    Py_ssize_t idx = idx0, n_extract = n_extract0, n_prog = 0, n_surv = 0;
    Py_ssize_t ring[LAST_PROGRESS][3]; /* the last progress lines: index, start, end */
    Triples surv = {NULL, 0, 0}, samples = {NULL, 0, 0};
    int failed = 0; /* out of memory */
    Py_BEGIN_ALLOW_THREADS
    while (p < stop) {
        const unsigned char *nl = memchr(p, '\n', (size_t)(stop - p));
        const unsigned char *end = nl ? nl : stop;
        int32_t v = table_get(self, shape_hash(p, end));
        Py_ssize_t a = p - base, b = end - base;
        int back = v < 0 || (v & FLAG_PREFIX);
        Py_ssize_t kind = 0;
        if (back && b - a <= CR_LINE_MAX && memchr(p, '\r', (size_t)(end - p))) {
            /* a \r-rewritten line (progress bar): dropped here when every segment is */
            Py_ssize_t seg_a = -1, seg_b = -1;
            int32_t last = cr_line(self, p, end, &seg_a, &seg_b);
            if (last >= 0) {
                back = 0;
                self->counts[last & VALUE_MASK]++;
                if (seg_a >= 0) {
                    Py_ssize_t *slot = ring[n_prog % LAST_PROGRESS];
                    slot[0] = idx;
                    slot[1] = a + seg_a;
                    slot[2] = a + seg_b;
                    n_prog++;
                }
                idx++;
                p = nl ? nl + 1 : stop;
                continue;
            }
        }
        if (!back && (v & FLAG_KEEP)) {
            kind = (Py_ssize_t)(v & KEEP_MASK) + 1;
            back = keep_line(self, v, p, end, line0 + idx, a, b);
            if (back < 0) {
                failed = 1;
                break;
            }
        } else if (!back) {
            self->counts[v & VALUE_MASK]++;
            if (v & FLAG_EXTRACT) {
                if (n_extract % every == 0) {
                    if (triples_push(&samples, idx, a, b) < 0) {
                        failed = 1;
                        break;
                    }
                    if (samples.n >= MAX_SAMPLES) { /* the stride was a bad guess: keep every other */
                        for (size_t j = 0; j < samples.n / 2; j++)
                            memcpy(samples.v + 3 * j, samples.v + 3 * (2 * j), 3 * sizeof(Py_ssize_t));
                        samples.n /= 2;
                        every *= 2;
                    }
                }
                n_extract++;
            }
            if (v & FLAG_PROGRESS) {
                Py_ssize_t *slot = ring[n_prog % LAST_PROGRESS];
                slot[0] = idx;
                slot[1] = a;
                slot[2] = b;
                n_prog++;
            }
        }
        if (back && kind) { /* a new rank/host of a kept shape: recorded here */
            if (record_variant(self, (size_t)(kind - 1), p, end) < 0) {
                failed = 1;
                break;
            }
        } else if (back) {
            if (triples_push(&surv, idx, a, b) < 0) {
                failed = 1;
                break;
            }
            n_surv++;
        }
        idx++;
        p = nl ? nl + 1 : stop;
        if (max_surv > 0 && n_surv >= max_surv) break;
    }
    Py_END_ALLOW_THREADS
    PyObject *result = NULL, *ls = NULL, *lm = NULL, *lp = NULL;
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t prog[LAST_PROGRESS * 3];
    size_t np = 0;
    for (Py_ssize_t k = n_prog > LAST_PROGRESS ? n_prog - LAST_PROGRESS : 0; k < n_prog; k++, np++)
        memcpy(prog + 3 * np, ring[k % LAST_PROGRESS], 3 * sizeof(Py_ssize_t));
    ls = triples_list(surv.v, surv.n);
    lm = triples_list(samples.v, samples.n);
    lp = triples_list(prog, np);
    if (ls && lm && lp)
        result = Py_BuildValue("(nnOOOn)", idx, (Py_ssize_t)(p - base), ls, lm, lp, n_extract);
done:
    Py_XDECREF(ls);
    Py_XDECREF(lm);
    Py_XDECREF(lp);
    PyMem_RawFree(surv.v);
    PyMem_RawFree(samples.v);
    return result;
}

/* scan(chunk, sample_every) -> (n_lines, survivors (index, start, end), samples, last_progress_lines, n_extract) */
static PyObject *ShapeTable_scan(ShapeTable *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t every = 1;
    if (!PyArg_ParseTuple(args, "y*n", &buf, &every)) return NULL;
    PyObject *r = scan_core(self, &buf, 0, 0, 1, every, 0, 0);
    PyBuffer_Release(&buf);
    if (!r) return NULL;
    PyObject *out = Py_BuildValue("(OOOOO)", PyTuple_GET_ITEM(r, 0), PyTuple_GET_ITEM(r, 2),
                                  PyTuple_GET_ITEM(r, 3), PyTuple_GET_ITEM(r, 4), PyTuple_GET_ITEM(r, 5));
    Py_DECREF(r);
    return out;
}

/* scan_from(chunk, start, idx0, line0, sample_every, n_extract0, max_survivors)
 *   -> (end_index, end_offset, survivors, samples, last_progress_lines, n_extract) */
static PyObject *ShapeTable_scan_from(ShapeTable *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start, idx0, every, n_extract0, max_surv;
    long long line0;
    if (!PyArg_ParseTuple(args, "y*nnLnnn", &buf, &start, &idx0, &line0, &every, &n_extract0, &max_surv))
        return NULL;
    PyObject *r = scan_core(self, &buf, start, idx0, line0, every, n_extract0, max_surv);
    PyBuffer_Release(&buf);
    return r;
}

static PyObject *ShapeTable_counts(ShapeTable *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = PyList_New((Py_ssize_t)self->ncounts);
    if (!out) return NULL;
    for (size_t i = 0; i < self->ncounts; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(self->counts[i]);
        if (!v) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, v);
    }
    return out;
}

static Py_ssize_t ShapeTable_len(ShapeTable *self) { return (Py_ssize_t)self->used; }

static PyMethodDef ShapeTable_methods[] = {
    {"add", (PyCFunction)ShapeTable_add, METH_VARARGS,
     "add(line, rule_index, extract=False, progress=False): mark the line's shape droppable"},
    {"add_prefix", (PyCFunction)ShapeTable_add_prefix, METH_VARARGS,
     "add_prefix(segment): a \\r segment of this shape is only a launcher prefix"},
    {"has", (PyCFunction)ShapeTable_contains, METH_VARARGS, "has(line): is the line's shape droppable"},
    {"scan", (PyCFunction)ShapeTable_scan, METH_VARARGS,
     "scan(chunk, sample_every) -> (n_lines, survivors (index, start, end), samples, last_progress_lines, n_extract)"},
    {"scan_from", (PyCFunction)ShapeTable_scan_from, METH_VARARGS,
     "scan_from(chunk, start, idx0, line0, sample_every, n_extract0, max_survivors) -> "
     "(end_index, end_offset, survivors, samples, last_progress_lines, n_extract)"},
    {"add_keep", (PyCFunction)ShapeTable_add_keep, METH_VARARGS,
     "add_keep(line, lo1, hi1, lo2, hi2, host_digit=0) -> slot: count the line's shape here (a kept template)"},
    {"probe_keep", (PyCFunction)ShapeTable_probe_keep, METH_VARARGS,
     "probe_keep(line, line_no) -> -1 not kept, 0 counted here"},
    {"keep_counts", (PyCFunction)ShapeTable_keep_counts, METH_NOARGS, "[(count, last_line)] per kept slot"},
    {"save_touched", (PyCFunction)ShapeTable_save_touched, METH_VARARGS,
     "save_touched(buffer): keep a copy of each slot's last counted line of the scanned buffer"},
    {"keep_last", (PyCFunction)ShapeTable_keep_last, METH_NOARGS, "[(line, text)] per kept slot"},
    {"keep_sets", (PyCFunction)ShapeTable_keep_sets, METH_NOARGS,
     "(host names by id, [(ranks, host ids)] per kept slot): the variants recorded here"},
    {"ranks_seen", (PyCFunction)ShapeTable_ranks_seen, METH_NOARGS, "every rank read from a kept line"},
    {"counts", (PyCFunction)ShapeTable_counts, METH_NOARGS, "lines dropped per rule index"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods ShapeTable_as_sequence = {
    .sq_length = (lenfunc)ShapeTable_len,
};

static PyTypeObject ShapeTableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "app.core._shapescan.ShapeTable",
    .tp_basicsize = sizeof(ShapeTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Hash set of droppable line shapes with a C scan loop.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ShapeTable_init,
    .tp_dealloc = (destructor)ShapeTable_dealloc,
    .tp_methods = ShapeTable_methods,
    .tp_as_sequence = &ShapeTable_as_sequence,
};

/* set_simd(enabled) -> previous: choose the compaction (tests compare both; a no-op without SSSE3) */
static PyObject *set_simd(PyObject *Py_UNUSED(module), PyObject *arg) {
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
#ifdef HAVE_SIMD_COMPACT
    int prev = use_simd;
    __builtin_cpu_init();
    use_simd = on && __builtin_cpu_supports("ssse3");
    return PyBool_FromLong(prev);
#else
    Py_RETURN_FALSE;
#endif
}

/* lines_with(buf, needle, length, cap) -> [(start, end)]: the spans (without the newline) of the
 * first `cap` lines of buf[:length] that contain `needle`, each line once. memmem runs without the
 * GIL: the NCCL init lines this finds sit in the first 32 MiB of a log, and bytes.find was ~1.4
 * GB/s there (placement.RankHosts.scan). */
static PyObject *lines_with(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer buf;
    const char *needle;
    Py_ssize_t nlen, length, cap;
    if (!PyArg_ParseTuple(args, "y*y#nn", &buf, &needle, &nlen, &length, &cap)) return NULL;
    if (length < 0 || length > buf.len) length = buf.len;
    if (cap < 0) cap = 0;
    Py_ssize_t *spans = cap ? PyMem_RawMalloc(sizeof(Py_ssize_t) * 2 * (size_t)cap) : NULL;
    if (cap && !spans) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    Py_ssize_t found = 0;
    const char *base = buf.buf;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t pos = 0;
    while (nlen > 0 && found < cap && pos < length) {
        const char *hit = memmem(base + pos, (size_t)(length - pos), needle, (size_t)nlen);
        if (!hit) break;
        Py_ssize_t at = hit - base, start = at, end;
        while (start > 0 && base[start - 1] != '\n') start--;
        const char *nl = memchr(hit, '\n', (size_t)(length - at));
        end = nl ? nl - base : length;
        spans[2 * found] = start;
        spans[2 * found + 1] = end;
        found++;
        pos = end + 1;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyObject *out = PyList_New(found);
    for (Py_ssize_t i = 0; out && i < found; i++) {
        PyObject *pair = Py_BuildValue("(nn)", spans[2 * i], spans[2 * i + 1]);
        if (!pair) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, pair);
    }
    PyMem_RawFree(spans);
    return out;
}

static PyMethodDef module_methods[] = {
    {"set_simd", set_simd, METH_O, "set_simd(enabled) -> previous setting of the SSSE3 compaction"},
    {"lines_with", lines_with, METH_VARARGS,
     "lines_with(buf, needle, length, cap) -> [(start, end)] of the lines of buf[:length] holding needle"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_shapescan", "C scan loop for logdx compression.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__shapescan(void) {
#ifdef HAVE_SIMD_COMPACT
    init_simd();
#endif
    if (PyType_Ready(&ShapeTableType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    Py_INCREF(&ShapeTableType);
    if (PyModule_AddObject(m, "ShapeTable", (PyObject *)&ShapeTableType) < 0) {
        Py_DECREF(&ShapeTableType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
