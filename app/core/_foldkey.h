/*
 * A kept line's template key (app/core/fields.py fold_key) for ASCII text, in C: the same result as
 *     _NUM_RE.sub("0", _HEX_RE.sub("<hex>", text))
 * with _HEX_RE = 0x[0-9a-fA-F]+|\b[0-9a-f]{12,}\b and _NUM_RE = \d+(?:\.\d+)?(?:[eE][+-]?\d+)?
 * (leftmost match, first alternative first, greedy, as the regex engine does). Text with any
 * non-ASCII character goes to the regex path (Unicode digits and word characters): fold_ascii
 * returns None for it. tests/core/test_fold_key.py checks both paths agree on random text.
 */
#ifndef LOGDX_FOLDKEY_H
#define LOGDX_FOLDKEY_H

static inline int fk_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static inline int fk_lhex(unsigned char c) { return fk_digit(c) || (c >= 'a' && c <= 'f'); }
static inline int fk_hex(unsigned char c) { return fk_lhex(c) || (c >= 'A' && c <= 'F'); }
static inline int fk_word(unsigned char c) {
    return fk_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* _HEX_RE.sub("<hex>", s) into out (room for n * 5 / 3 + 8 bytes); returns the length written */
static Py_ssize_t fk_mask_hex(const unsigned char *s, Py_ssize_t n, unsigned char *out) {
    Py_ssize_t i = 0, o = 0;
    while (i < n) {
        unsigned char c = s[i];
        Py_ssize_t j = -1;
        if (c == '0' && i + 2 < n && s[i + 1] == 'x' && fk_hex(s[i + 2])) {
            j = i + 3;
            while (j < n && fk_hex(s[j])) j++;
        } else if (fk_lhex(c) && (i == 0 || !fk_word(s[i - 1]))) {
            /* \b[0-9a-f]{12,}\b: the whole run, then a boundary (a shorter run ends between two
             * word characters, where \b cannot hold) */
            Py_ssize_t k = i + 1;
            while (k < n && fk_lhex(s[k])) k++;
            if (k - i >= 12 && (k == n || !fk_word(s[k]))) j = k;
        }
        if (j < 0) {
            out[o++] = c;
            i++;
        } else {
            memcpy(out + o, "<hex>", 5);
            o += 5;
            i = j;
        }
    }
    return o;
}

/* _NUM_RE.sub("0", s) into out (room for n bytes); returns the length written */
static Py_ssize_t fk_mask_num(const unsigned char *s, Py_ssize_t n, unsigned char *out) {
    Py_ssize_t i = 0, o = 0;
    while (i < n) {
        if (!fk_digit(s[i])) {
            out[o++] = s[i++];
            continue;
        }
        Py_ssize_t j = i + 1;
        while (j < n && fk_digit(s[j])) j++;
        if (j + 1 < n && s[j] == '.' && fk_digit(s[j + 1])) {
            j += 2;
            while (j < n && fk_digit(s[j])) j++;
        }
        if (j < n && (s[j] == 'e' || s[j] == 'E')) {
            Py_ssize_t k = j + 1;
            if (k < n && (s[k] == '+' || s[k] == '-')) k++;
            if (k < n && fk_digit(s[k])) {
                while (k < n && fk_digit(s[k])) k++;
                j = k;
            }
        }
        out[o++] = '0';
        i = j;
    }
    return o;
}

static PyObject *fold_ascii(PyObject *Py_UNUSED(module), PyObject *arg) {
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "fold_ascii() takes a str");
        return NULL;
    }
    if (PyUnicode_READY(arg) < 0) return NULL;
    if (!PyUnicode_IS_ASCII(arg)) Py_RETURN_NONE;
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg);
    const unsigned char *s = PyUnicode_1BYTE_DATA(arg);
    unsigned char stack[2 * 2048];
    Py_ssize_t cap = n * 5 / 3 + 8;
    unsigned char *work = stack;
    if (2 * cap > (Py_ssize_t)sizeof(stack)) {
        work = PyMem_Malloc((size_t)(2 * cap));
        if (work == NULL) return PyErr_NoMemory();
    }
    Py_ssize_t m = fk_mask_hex(s, n, work);
    Py_ssize_t k = fk_mask_num(work, m, work + cap);
    PyObject *out = PyUnicode_New(k, 127);
    if (out != NULL) memcpy(PyUnicode_1BYTE_DATA(out), work + cap, (size_t)k);
    if (work != stack) PyMem_Free(work);
    return out;
}

#endif
