/*
 * Kept slots: shapes of plain surviving lines, counted here (count, last line) with the ranks
 * and hosts their lines carry; only a line with a rank/host not seen for its slot goes back to
 * Python (app/core/keptslots.py is the Python side). Included by _shapescan.c after
 * _shapetable.h.
 */
#ifndef LOGDX_KEPTSLOTS_H
#define LOGDX_KEPTSLOTS_H

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

#endif
