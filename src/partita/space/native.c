/* Propagation to a fixpoint, interpreted in C from the tables of a compiled space.
 *
 * This is the engine of engine.py and counters.py, and the occurrence functions that
 * compiler.py generates in Python, run over one flat int64 array (the "program", built by
 * native.py) instead of Python objects: same worklist, same order of occurrences, same
 * counters, so it reaches the same fixpoint, the same dead end and the same fired triggers.
 * The Python engine stays the reference (tests compare the two on random descents).
 *
 * One file serves every space: nothing here depends on a kernel, so it is compiled once per
 * machine. Layouts of the records are documented in native.py, which writes them.
 */
#include <stdint.h>
#include <string.h>

typedef int64_t i64;
typedef uint64_t u64;

#define INF (((i64)1) << 60)

/* Header of the program. */
enum {
    H_NSLOTS, H_NCHOICE, H_ABSENT, H_NCOUNTERS, H_NOBJ, H_SLOT_CHOICE, H_SLOT_IDS,
    H_SLOT_UNIV, H_CHOICES, H_WATCH, H_COUNTERS, H_ROOT, H_BASE
};

/* Condition types. */
enum { C_STATIC, C_IS, C_REL, C_CMP_INT, C_CMP_CNT };
/* Comparison operators. */
enum { OP_LE, OP_LT, OP_GE, OP_GT, OP_EQ, OP_IN };

#define MAX_VARS 8
#define FIRED_WIDTH 6   /* tid, n, id0..id3 */

typedef struct {
    const i64 *P;
    i64 nobj;
    i64 absent;
    i64 *vec;
    i64 *queue;
    int qlen;
    i64 *pending_old;
    char *pending;
    char *used;     /* per object: bound to a variable of the grounding being enumerated */
    i64 *fired;
    int nfired;
    int max_fired;
    int overflow;
    i64 dead_slot;
    i64 dead_kid;
} Ctx;

/* ---------------------------------------------------------------- restriction */

static int R(Ctx *c, i64 slot, i64 mask, i64 kid) {
    i64 old = c->vec[slot];
    i64 nw = old & mask;
    if (nw != old) {
        if (!nw) {
            c->dead_slot = slot;
            c->dead_kid = kid;
            return 1;
        }
        c->vec[slot] = nw;
        if (!c->pending[slot]) {
            c->pending[slot] = 1;
            c->pending_old[slot] = old;
            c->queue[c->qlen++] = slot;
        }
    }
    return 0;
}

static inline int ctz64(u64 x) { return __builtin_ctzll(x); }
static inline int top64(u64 x) { return 63 - __builtin_clzll(x); }

static inline i64 sat_mul(i64 a, i64 b) {
    if (a == 0 || b == 0) return 0;
    if (a >= INF || b >= INF || a > INF / b) return INF;
    i64 r = a * b;
    return r > INF ? INF : r;
}

static inline i64 sat_add(i64 a, i64 b) {
    i64 r = a + b;
    return r > INF ? INF : r;
}

/* ---------------------------------------------------------------- counters */

/* A term record: [n_conds, (slot, mask)*, value_is_slot, value, n_quot (-1: none), quot*,
 * n_partners (-1: none), (slot, j)*]. A counter record: [mul, half, lo_slot, merged_bit,
 * n_terms, cocc_off, n_ids, id0, id1, id2, id3, term_off*]. */

typedef struct {
    char certain, possible;
    i64 vmin, vmax;
} Status;

#define MAX_TERMS 512

static const i64 *univ(const i64 *P, i64 slot) { return P + P[P[H_SLOT_UNIV] + slot]; }

/* The interval of a counter, with per-term statuses (counters.py: _interval). */
static void interval(Ctx *c, const i64 *cr, i64 *plo, i64 *phi, Status *st) {
    const i64 *P = c->P;
    const i64 *vec = c->vec;
    int is_mul = (int)cr[0];
    i64 mbit = cr[3];
    int nt = (int)cr[4];
    i64 lo = is_mul ? 1 : 0, hi = lo;
    char counted[MAX_TERMS];
    for (int idx = 0; idx < nt; idx++) {
        const i64 *t = P + cr[11 + idx];
        int nc = (int)t[0];
        int certain = 1, possible = 1;
        for (int k = 0; k < nc; k++) {
            i64 d = vec[t[1 + 2 * k]], m = t[2 + 2 * k];
            if (!(d & m)) { possible = 0; break; }
            if (d & ~m) certain = 0;
        }
        const i64 *q = t + 1 + 2 * nc + 2;
        int nq = (int)q[0];
        const i64 *pt = q + 1 + (nq > 0 ? nq : 0);
        if (possible && nq > 0) {
            for (int k = 0; k < nq; k++)
                if (vec[q[1 + k]] == mbit) { possible = 0; break; }
        }
        if (!possible) {
            st[idx].certain = st[idx].possible = 0;
            st[idx].vmin = st[idx].vmax = 0;
            counted[idx] = 0;
            continue;
        }
        i64 vmin, vmax;
        if (t[1 + 2 * nc]) {
            i64 vs = t[2 + 2 * nc];
            u64 d = (u64)vec[vs];
            const i64 *u = univ(P, vs);
            vmin = u[1 + ctz64(d)];
            vmax = u[1 + top64(d)];
        } else {
            vmin = vmax = t[2 + 2 * nc];
        }
        int np = (int)pt[0];
        if (certain && nq > 0 && np >= 0) {
            for (int k = 0; k < np; k++) {
                i64 s = pt[1 + 2 * k], j = pt[2 + 2 * k];
                if (j >= idx) break;
                if (counted[j] && (vec[s] & mbit)) { certain = 0; break; }
            }
        }
        st[idx].certain = (char)certain;
        st[idx].possible = 1;
        st[idx].vmin = vmin;
        st[idx].vmax = vmax;
        counted[idx] = (char)certain;
        if (is_mul) {
            if (certain) lo = sat_mul(lo, vmin);
            hi = sat_mul(hi, vmax);
        } else {
            if (certain) lo = sat_add(lo, vmin);
            hi = sat_add(hi, vmax);
        }
    }
    *plo = lo;
    *phi = hi;
}

static const i64 *counter_rec(const i64 *P, i64 ci) { return P + P[P[H_COUNTERS] + ci]; }

static void recompute(Ctx *c, i64 ci) {
    const i64 *cr = counter_rec(c->P, ci);
    Status st[MAX_TERMS];
    i64 lo, hi;
    interval(c, cr, &lo, &hi, st);
    c->vec[cr[2]] = lo;
    c->vec[cr[2] + 1] = cr[1] ? INF : hi;
}

/* A bound record: [0, value] or [1, n, values*]. */
static int in_bound(const i64 *b, i64 v) {
    if (b[0] == 0) return b[1] == v;
    for (i64 k = 0; k < b[1]; k++)
        if (b[2 + k] == v) return 1;
    return 0;
}

static int compare_state(i64 lo, i64 hi, int op, const i64 *b) {
    i64 v = b[1];
    switch (op) {
    case OP_LE: return hi <= v ? 1 : (lo > v ? -1 : 0);
    case OP_LT: return hi < v ? 1 : (lo >= v ? -1 : 0);
    case OP_GE: return lo >= v ? 1 : (hi < v ? -1 : 0);
    case OP_GT: return lo > v ? 1 : (hi <= v ? -1 : 0);
    case OP_EQ:
        if (lo == hi && hi == v) return 1;
        return (lo <= v && v <= hi) ? 0 : -1;
    default: {
        if (lo == hi) return in_bound(b, lo) ? 1 : -1;
        for (i64 k = 0; k < b[1]; k++)
            if (lo <= b[2 + k] && b[2 + k] <= hi) return 0;
        return -1;
    }
    }
}

static int force_false(Ctx *c, const i64 *t, i64 kid) {
    int nc = (int)t[0], open = 0;
    i64 os = 0, om = 0;
    for (int k = 0; k < nc; k++) {
        i64 s = t[1 + 2 * k], m = t[2 + 2 * k];
        if (c->vec[s] & ~m) {
            open++;
            os = s;
            om = m;
        }
    }
    if (open == 1) return R(c, os, ~om, kid);
    if (open == 0 && nc) return R(c, t[1], 0, kid);
    return 0;
}

static int force_true(Ctx *c, const i64 *t, i64 kid) {
    int nc = (int)t[0];
    for (int k = 0; k < nc; k++)
        if (R(c, t[1 + 2 * k], t[2 + 2 * k], kid)) return 1;
    return 0;
}

/* Counters.py's _enforce_range. The values of the other terms are combined afresh from the
 * statuses (saturating), which equals dividing the exact total by the term's value. */
static int enforce_range(Ctx *c, i64 ci, int has_low, i64 low, int has_high, i64 high,
                         const i64 *exact, i64 kid) {
    const i64 *P = c->P;
    const i64 *cr = counter_rec(P, ci);
    int is_mul = (int)cr[0], half = (int)cr[1];
    i64 mbit = cr[3];
    int nt = (int)cr[4];
    Status st[MAX_TERMS];
    i64 flo, fhi;
    interval(c, cr, &flo, &fhi, st);
    char skip[MAX_TERMS];
    /* Where no end saturates and no value can cancel another (a sum's values are at least
     * 0, a product's at least 1), the other terms' share is the interval less the term's
     * own (and its skipped partners'): exact, and linear in the terms where recombining
     * them is quadratic. */
    int exact_total = flo < INF && fhi < INF;
    for (int j = 0; j < nt && exact_total; j++)
        if (st[j].possible && (is_mul ? st[j].vmin < 1 : st[j].vmin < 0)) exact_total = 0;
    for (int idx = 0; idx < nt; idx++) {
        if (!st[idx].possible) continue;
        const i64 *t = P + cr[11 + idx];
        int nc = (int)t[0];
        const i64 *q = t + 1 + 2 * nc + 2;
        int nq = (int)q[0];
        const i64 *pt = q + 1 + (nq > 0 ? nq : 0);
        int np = (int)pt[0];
        i64 olo, ohi;
        if (exact_total) {
            olo = flo;
            if (st[idx].certain) olo = is_mul ? olo / st[idx].vmin : olo - st[idx].vmin;
            if (!st[idx].certain && np > 0) {
                /* a partner listed twice is taken out once */
                for (int k = 0; k < np; k++) skip[pt[2 + 2 * k]] = 0;
                for (int k = 0; k < np; k++) {
                    i64 s = pt[1 + 2 * k], j = pt[2 + 2 * k];
                    if (j != idx && !skip[j] && st[j].certain && (c->vec[s] & mbit)) {
                        skip[j] = 1;
                        olo = is_mul ? olo / st[j].vmin : olo - st[j].vmin;
                    }
                }
            }
            ohi = is_mul ? fhi / st[idx].vmax : fhi - st[idx].vmax;
        } else {
            memset(skip, 0, (size_t)nt);
            skip[idx] = 1;
            if (!st[idx].certain && np > 0) {
                for (int k = 0; k < np; k++) {
                    i64 s = pt[1 + 2 * k], j = pt[2 + 2 * k];
                    if (st[j].certain && (c->vec[s] & mbit)) skip[j] = 1;
                }
            }
            olo = is_mul ? 1 : 0;
            ohi = olo;
            for (int j = 0; j < nt; j++) {
                if (st[j].certain && !skip[j])
                    olo = is_mul ? sat_mul(olo, st[j].vmin) : sat_add(olo, st[j].vmin);
                if (st[j].possible && j != idx)
                    ohi = is_mul ? sat_mul(ohi, st[j].vmax) : sat_add(ohi, st[j].vmax);
            }
        }
        if (half) ohi = INF;
        int certain = st[idx].certain;
        const i64 *tv = t + 1 + 2 * nc;
#define FITS(v, out)                                                              \
        do {                                                                      \
            i64 tlo_ = is_mul ? sat_mul(olo, (v)) : sat_add(olo, (v));            \
            i64 thi_ = is_mul ? sat_mul(ohi, (v)) : sat_add(ohi, (v));            \
            (out) = 1;                                                            \
            if (has_high && tlo_ > high) (out) = 0;                               \
            else if (has_low && !half && thi_ < low) (out) = 0;                   \
            else if (exact && olo == ohi && !in_bound(exact, tlo_)) (out) = 0;    \
        } while (0)
        if (tv[0]) {
            i64 vs = tv[1];
            const i64 *u = univ(P, vs);
            u64 d = (u64)c->vec[vs];
            i64 keep = 0;
            for (int b = 0; b < (int)u[0]; b++) {
                if (!(d >> b & 1)) continue;
                int ok;
                FITS(u[1 + b], ok);
                if (ok) keep |= ((i64)1) << b;
            }
            if (certain) {
                if (R(c, vs, keep, kid)) return 1;
            } else if (!keep) {
                if (force_false(c, t, kid)) return 1;
            }
        } else {
            int ok;
            FITS(tv[1], ok);
            if (!ok) {
                if (certain) {
                    if (R(c, nc ? t[1] : c->absent, 0, kid)) return 1;
                } else {
                    if (force_false(c, t, kid)) return 1;
                }
            }
        }
#undef FITS
        if (has_low && !half && !certain) {
            if (ohi < low && nq <= 0) {
                if (force_true(c, t, kid)) return 1;
            }
        }
    }
    return 0;
}

static int enforce_counter(Ctx *c, i64 ci, int op, const i64 *b, i64 kid) {
    switch (op) {
    case OP_IN: {
        i64 mn = b[2], mx = b[2];
        for (i64 k = 1; k < b[1]; k++) {
            if (b[2 + k] < mn) mn = b[2 + k];
            if (b[2 + k] > mx) mx = b[2 + k];
        }
        return enforce_range(c, ci, 1, mn, 1, mx, b, kid);
    }
    case OP_LE: return enforce_range(c, ci, 0, 0, 1, b[1], NULL, kid);
    case OP_LT: return enforce_range(c, ci, 0, 0, 1, b[1] - 1, NULL, kid);
    case OP_GE: return enforce_range(c, ci, 1, b[1], 0, 0, NULL, kid);
    case OP_GT: return enforce_range(c, ci, 1, b[1] + 1, 0, 0, NULL, kid);
    default: return enforce_range(c, ci, 1, b[1], 1, b[1], b, kid);
    }
}

/* ---------------------------------------------------------------- occurrences */

/* An occurrence record:
 *   [kid, trigger, n_vars, n_params, param_var[2], n_unique, unique_var[2],
 *    var records (n_vars x 4: set_kind, set_off, parent, member_off),
 *    n_pattern_checks, pattern_check_var*, n_loops, (loop_var, n_deferred, deferred*)*,
 *    levels: (n, cond_off*) x (n_loops + 1), n_conds, cond_off (by index; -1 static)*]
 * A plain set is [n, members*] with a membership table of n_obj flags (or -1: everything);
 * a parametric set is a table of n_obj offsets of [n, members*] lists (-1: empty), with
 * a membership bit table of n_obj x n_obj bits, parent-major (-1: none; scan the list). */

typedef struct {
    const i64 *rec;
    const i64 *vars;
    const i64 **levels;
    const i64 *conds;
    int n_loops;
    const i64 *loops[MAX_VARS];
} Occ;

static inline i64 table_index(i64 n, i64 arity, const i64 *vals, i64 v0, i64 v1) {
    if (arity == 2) return vals[v0] * n + vals[v1];
    return arity ? vals[v0] : 0;
}

/* Signed slot and oriented domain of a choice instance. Slot tables hold int32 entries, two
 * a word (native.py packs them in the machine's byte order): the order table of a lowered
 * matmul then fits the L1 cache beside the vector. */
static inline i64 slot_at(const i64 *P, i64 off, i64 at) {
    int32_t v;
    memcpy(&v, (const char *)(P + off) + 4 * at, sizeof v);
    return v;
}

static inline void read_choice(Ctx *c, const i64 *r, const i64 *vals, i64 *s, i64 *d) {
    /* r: [table_off, arity, v0, v1, flip_off] */
    i64 slot = slot_at(c->P, r[0], table_index(c->nobj, r[1], vals, r[2], r[3]));
    *s = slot;
    *d = slot >= 0 ? c->vec[slot] : c->P[r[4] + c->vec[~slot]];
}

static const i64 *bound_of(const Ctx *c, const i64 *r, const i64 *vals) {
    /* r: [kind, ref, arity, v0, v1]: kind 0 a bound record, 1 a table of them */
    const i64 *P = c->P;
    if (r[0] == 0) return P + r[1];
    i64 off = P[r[1] + table_index(c->nobj, r[2], vals, r[3], r[4])];
    return off < 0 ? NULL : P + off;
}

static i64 ok_mask(const i64 *P, i64 slot, int op, const i64 *b) {
    const i64 *u = univ(P, slot);
    i64 m = 0;
    for (int i = 0; i < (int)u[0]; i++) {
        i64 v = u[1 + i];
        int ok;
        switch (op) {
        case OP_LE: ok = v <= b[1]; break;
        case OP_LT: ok = v < b[1]; break;
        case OP_GE: ok = v >= b[1]; break;
        case OP_GT: ok = v > b[1]; break;
        case OP_EQ: ok = v == b[1]; break;
        default: ok = in_bound(b, v);
        }
        if (ok) m |= ((i64)1) << i;
    }
    return m;
}

static int rel_test(int kind, i64 a, i64 b) { return kind == 1 ? a == b : a != b; }

/* A tabulated relation between integer choices (kind 3; k[13], k[14]: the compact index of
 * each slot of either choice, -1 elsewhere; k[15]: [n_b, offset per pair of indices]): per
 * value of a, the mask of the values of b related to it. */
static const i64 *rel_rows(const i64 *P, const i64 *k, i64 sa, i64 sb) {
    i64 ia = P[k[13] + sa], ib = P[k[14] + sb];
    return P + P[k[15] + 1 + ia * P[k[15]] + ib];
}

/* The values of `d` (universe `u`) related to some value of `e` (universe `v`). */
static i64 supported(int kind, const i64 *u, i64 d, const i64 *v, i64 e) {
    i64 keep = 0;
    for (u64 x = (u64)d; x; x &= x - 1)
        for (u64 y = (u64)e; y; y &= y - 1)
            if (rel_test(kind, u[1 + ctz64(x)], v[1 + ctz64(y)])) {
                keep |= ((i64)1) << ctz64(x);
                break;
            }
    return keep;
}

/* 1 if the condition certainly holds, -1 if it certainly fails, else 0. */
static inline __attribute__((always_inline)) int cond_state(Ctx *c, const i64 *k, const i64 *vals) {
    const i64 *P = c->P;
    i64 absent = c->absent;
    switch (k[0]) {
    case C_IS: {
        /* [type, ci, table_off, arity, v0, v1, flip_off, is_int, mask|masks_off] */
        i64 s, d;
        read_choice(c, k + 2, vals, &s, &d);
        i64 m = k[7] ? P[k[8] + s] : k[8];
        if (!(d & ~m)) return 1;
        return (d & m) ? 0 : -1;
    }
    case C_REL: {
        /* [type, ci, A(5), B(5), kind, sup_a, all_a, sup_b] */
        i64 sa, da, sb, db;
        read_choice(c, k + 2, vals, &sa, &da);
        read_choice(c, k + 7, vals, &sb, &db);
        if (sa == absent || sb == absent) return -1;
        int kind = (int)k[12];
        if (kind == 0) {
            if (!(da & ~P[k[14] + db])) return 1;
            return (da & P[k[13] + db]) ? 0 : -1;
        }
        int any = 0, all = 1;
        if (kind == 3) {
            const i64 *rows = rel_rows(P, k, sa, sb);
            for (u64 x = (u64)da; x; x &= x - 1) {
                i64 r = rows[ctz64(x)];
                if (r & db) any = 1;
                if (db & ~r) all = 0;
            }
        } else {
            const i64 *ua = univ(P, sa), *ub = univ(P, sb);
            for (u64 x = (u64)da; x; x &= x - 1)
                for (u64 y = (u64)db; y; y &= y - 1) {
                    if (rel_test(kind, ua[1 + ctz64(x)], ub[1 + ctz64(y)])) any = 1;
                    else all = 0;
                }
        }
        if (all) return 1;
        return any ? 0 : -1;
    }
    case C_CMP_INT: {
        /* [type, ci, table_off, arity, v0, v1, flip_off, op, bound(5)] */
        i64 s, d;
        read_choice(c, k + 2, vals, &s, &d);
        if (s == absent) return -1;
        const i64 *b = bound_of(c, k + 8, vals);
        i64 ok = ok_mask(P, s, (int)k[7], b);
        if (!(d & ~ok)) return 1;
        return (d & ok) ? 0 : -1;
    }
    case C_CMP_CNT: {
        /* [type, ci, table_off, arity, v0, v1, op, bound(5)] */
        i64 ci = P[k[2] + table_index(c->nobj, k[3], vals, k[4], k[5])];
        if (ci < 0) return -1;
        const i64 *b = bound_of(c, k + 7, vals);
        const i64 *cr = counter_rec(P, ci);
        return compare_state(c->vec[cr[2]], c->vec[cr[2] + 1], (int)k[6], b);
    }
    }
    return 0;
}

static inline int restrict_signed(Ctx *c, i64 slot, i64 mask, i64 flip_off, i64 kid) {
    if (slot >= 0) return R(c, slot, mask, kid);
    return R(c, ~slot, flip_off >= 0 ? c->P[flip_off + mask] : mask, kid);
}

static inline i64 read_signed(Ctx *c, i64 slot, i64 flip_off) {
    if (slot >= 0) return c->vec[slot];
    return flip_off >= 0 ? c->P[flip_off + c->vec[~slot]] : c->vec[~slot];
}

static int cond_enforce(Ctx *c, const i64 *k, const i64 *vals, i64 kid) {
    const i64 *P = c->P;
    switch (k[0]) {
    case C_IS: {
        i64 s, d;
        read_choice(c, k + 2, vals, &s, &d);
        if (k[7]) return R(c, s, P[k[8] + s], kid);
        return restrict_signed(c, s, k[8], k[6], kid);
    }
    case C_REL: {
        i64 sa, da, sb, db;
        read_choice(c, k + 2, vals, &sa, &da);
        read_choice(c, k + 7, vals, &sb, &db);
        int kind = (int)k[12];
        if (kind == 0) {
            i64 fa = k[6], fb = k[11];
            db = read_signed(c, sb, fb);
            if (restrict_signed(c, sa, P[k[13] + db], fa, kid)) return 1;
            da = read_signed(c, sa, fa);
            return restrict_signed(c, sb, P[k[15] + da], fb, kid);
        }
        if (kind == 3) {
            const i64 *rows = rel_rows(P, k, sa, sb);
            i64 keep = 0;
            db = c->vec[sb];
            for (u64 x = (u64)c->vec[sa]; x; x &= x - 1)
                if (rows[ctz64(x)] & db) keep |= ((i64)1) << ctz64(x);
            if (R(c, sa, keep, kid)) return 1;
            keep = 0;
            for (u64 x = (u64)c->vec[sa]; x; x &= x - 1) keep |= rows[ctz64(x)] & db;
            return R(c, sb, keep, kid);
        }
        const i64 *ua = univ(P, sa), *ub = univ(P, sb);
        if (R(c, sa, supported(kind, ua, c->vec[sa], ub, c->vec[sb]), kid)) return 1;
        /* Equality and difference are symmetric: the same test supports b's values. */
        return R(c, sb, supported(kind, ub, c->vec[sb], ua, c->vec[sa]), kid);
    }
    case C_CMP_INT: {
        i64 s, d;
        read_choice(c, k + 2, vals, &s, &d);
        const i64 *b = bound_of(c, k + 8, vals);
        return R(c, s, ok_mask(P, s, (int)k[7], b), kid);
    }
    case C_CMP_CNT: {
        i64 ci = P[k[2] + table_index(c->nobj, k[3], vals, k[4], k[5])];
        const i64 *b = bound_of(c, k + 7, vals);
        return enforce_counter(c, ci, (int)k[6], b, kid);
    }
    }
    return 0;
}

static void fire(Ctx *c, i64 tid, const i64 *vals, int n_vars) {
    for (int f = 0; f < c->nfired; f++) {
        const i64 *e = c->fired + FIRED_WIDTH * f;
        if (e[0] != tid || e[1] != n_vars) continue;
        int same = 1;
        for (int v = 0; v < n_vars; v++)
            if (e[2 + v] != vals[v]) { same = 0; break; }
        if (same) return;
    }
    if (c->nfired >= c->max_fired || n_vars > FIRED_WIDTH - 2) {
        c->overflow = 1;
        return;
    }
    i64 *e = c->fired + FIRED_WIDTH * c->nfired++;
    e[0] = tid;
    e[1] = n_vars;
    for (int v = 0; v < n_vars; v++) e[2 + v] = vals[v];
}

static int member(const i64 *P, const i64 *var, const i64 *vals, i64 x) {
    /* var: [set_kind, set_off, parent, member_off] */
    if (var[0] == 0) return var[3] < 0 || P[var[3] + x];
    if (var[3] >= 0) {
        i64 at = vals[var[2]] * P[H_NOBJ] + x;
        return (int)((u64)P[var[3] + (at >> 6)] >> (at & 63) & 1);
    }
    i64 off = P[var[1] + vals[var[2]]];
    if (off < 0) return 0;
    for (i64 k = 0; k < P[off]; k++)
        if (P[off + 1 + k] == x) return 1;
    return 0;
}

/* Evaluate the conditions of one depth; returns 1 when one certainly holds (the clause is
 * satisfied, or for a trigger: one fails), updating the unknown count n and its index u. */
static inline __attribute__((always_inline)) int eval_level(Ctx *c, const Occ *o, int depth, const i64 *vals, int *n, int *u,
                      int trigger) {
    const i64 *P = c->P;
    const i64 *lv = o->levels[depth];
    for (i64 k = 0; k < lv[0]; k++) {
        const i64 *cd = P + lv[1 + k];
        if (cd[0] == C_STATIC) {
            /* [type, ci, table_off, arity, v0, v1]; the table is packed 64 flags a word */
            i64 at = table_index(c->nobj, cd[3], vals, cd[4], cd[5]);
            int t = (int)((u64)P[cd[2] + (at >> 6)] >> (at & 63) & 1);
            if (trigger ? !t : t) return 1;
            continue;
        }
        if (trigger) {
            /* Only Is conditions: exit unless certainly true. */
            i64 s, d;
            read_choice(c, cd + 2, vals, &s, &d);
            i64 m = cd[7] ? P[cd[8] + s] : cd[8];
            if (d & ~m) return 1;
            continue;
        }
        int st = cond_state(c, cd, vals);
        if (st == 1) return 1;
        if (st == 0) {
            *n += 1;
            *u = (int)cd[1];
        }
    }
    return 0;
}

/* Reached with every variable bound: unit propagation, or a trigger's firing. */
static int finish(Ctx *c, const Occ *o, const i64 *vals, int n, int u) {
    const i64 *rec = o->rec;
    if (rec[1] >= 0) {
        if (n == 0) fire(c, rec[1], vals, (int)rec[2]);
        return 0;
    }
    if (n == 0) {
        c->dead_slot = -1;
        c->dead_kid = rec[0];
        return 1;
    }
    if (n == 1) return cond_enforce(c, c->P + o->conds[1 + u], vals, rec[0]);
    return 0;
}

static int run_from(Ctx *c, const Occ *o, int depth, i64 *vals, int n, int u);

static int run_loops(Ctx *c, const Occ *o, int depth, i64 *vals, int n, int u) {
    if (depth > o->n_loops) return finish(c, o, vals, n, u);
    return run_from(c, o, depth, vals, n, u);
}

static int run_from(Ctx *c, const Occ *o, int depth, i64 *vals, int n, int u) {
    const i64 *P = c->P;
    const i64 *rec = o->rec;
    int trigger = rec[1] >= 0;
    const i64 *lp = o->loops[depth - 1];
    int v = (int)lp[0];
    const i64 *var = o->vars + 4 * v;
    const i64 *src;
    if (var[0] == 0) {
        src = P + var[1];
    } else {
        i64 off = P[var[1] + vals[var[2]]];
        if (off < 0) return 0;
        src = P + off;
    }
    for (i64 k = 0; k < src[0]; k++) {
        i64 x = src[1 + k];
        /* the variables of a grounding name distinct objects */
        if (c->used[x]) continue;
        vals[v] = x;
        int ok = 1;
        for (i64 q = 0; q < lp[1]; q++) {
            i64 dv = lp[2 + q];
            if (!member(P, o->vars + 4 * dv, vals, vals[dv])) { ok = 0; break; }
        }
        if (!ok) continue;
        c->used[x] = 1;
        int n2 = n, u2 = u;
        int r = 0;
        /* A clause propagates only with at most one condition undecided: once two are,
         * no binding of the remaining variables can make it act. */
        if (!eval_level(c, o, depth, vals, &n2, &u2, trigger) && (trigger || n2 < 2))
            r = run_loops(c, o, depth + 1, vals, n2, u2);
        c->used[x] = 0;
        if (r) return r;
    }
    return 0;
}

static void decode(const i64 *P, i64 off, Occ *o, const i64 **levels) {
    const i64 *rec = P + off;
    o->rec = rec;
    int n_vars = (int)rec[2];
    o->vars = rec + 9;
    const i64 *p = o->vars + 4 * n_vars;
    p += 1 + p[0]; /* pattern checks */
    o->n_loops = (int)p[0];
    p++;
    for (int l = 0; l < o->n_loops; l++) {
        o->loops[l] = p;
        p += 2 + p[1];
    }
    for (int l = 0; l <= o->n_loops; l++) {
        levels[l] = p;
        p += 1 + p[0];
    }
    o->levels = levels;
    o->conds = p;
}

static int run_occurrence(Ctx *c, i64 off, int nargs, i64 a0, i64 a1) {
    const i64 *P = c->P;
    Occ o;
    const i64 *levels[MAX_VARS + 1];
    decode(P, off, &o, levels);
    const i64 *rec = o.rec;
    int n_vars = (int)rec[2];
    int n_params = (int)rec[3];
    i64 vals[MAX_VARS];
    char bound[MAX_VARS];
    memset(bound, 0, sizeof bound);
    i64 args[2] = {a0, a1};
    (void)nargs;
    for (int p = 0; p < n_params; p++) {
        int v = (int)rec[4 + p];
        if (bound[v]) {
            if (args[p] != vals[v]) return 0;
        } else {
            vals[v] = args[p];
            bound[v] = 1;
        }
    }
    int n_unique = (int)rec[6];
    if (n_unique == 2 && vals[rec[7]] == vals[rec[8]]) return 0;
    const i64 *pc = o.vars + 4 * n_vars;
    for (i64 q = 0; q < pc[0]; q++) {
        i64 v = pc[1 + q];
        if (!member(P, o.vars + 4 * v, vals, vals[v])) return 0;
    }
    int n = 0, u = -1;
    if (eval_level(c, &o, 0, vals, &n, &u, rec[1] >= 0)) return 0;
    if (rec[1] < 0 && n >= 2) return 0;  /* as in run_from */
    for (int v = 0; v < n_vars; v++)
        if (bound[v]) c->used[vals[v]] = 1;
    int r = run_loops(c, &o, 1, vals, n, u);
    for (int v = 0; v < n_vars; v++)
        if (bound[v]) c->used[vals[v]] = 0;
    return r;
}

/* ---------------------------------------------------------------- the worklist */

/* Domains only shrink: a condition "within mask" turns false when the last value in the
 * mask goes, true when the last value outside it goes. A clause can only propagate when one
 * of its conditions turns false, a trigger only fire when one turns true. */
enum { GATE_ANY, GATE_FALSE, GATE_TRUE };

static inline int turned(int gate, i64 before, i64 now, i64 mask) {
    if (gate == GATE_FALSE) return !(now & mask) && (before & mask);
    return !(now & ~mask) && (before & ~mask);
}

static int process(Ctx *c) {
    const i64 *P = c->P;
    i64 n_choice = P[H_NCHOICE];
    i64 base = P[H_ABSENT] + 1;
    while (c->qlen) {
        i64 slot = c->queue[--c->qlen];
        c->pending[slot] = 0;
        i64 before = c->pending_old[slot];
        if (slot < n_choice) {
            const i64 *ch = P + P[P[H_CHOICES] + P[P[H_SLOT_CHOICE] + slot]];
            /* [both, n_entries, (occ_off, has_mask, mask, flipped)*] */
            int both = (int)ch[0];
            i64 id0 = P[P[H_SLOT_IDS] + 3 * slot + 1], id1 = P[P[H_SLOT_IDS] + 3 * slot + 2];
            int nids = (int)P[P[H_SLOT_IDS] + 3 * slot];
            i64 now = c->vec[slot];
            int every = before == -1;
            for (i64 e = 0; e < ch[1]; e++) {
                const i64 *en = ch + 2 + 4 * e;
                i64 fn = en[0];
                int gate = (int)en[1];
                i64 mask = en[2], fl = en[3];
                if (every || gate == GATE_ANY || turned(gate, before, now, mask)) {
                    if (run_occurrence(c, fn, nids, id0, id1)) return 1;
                }
                if (both && (every || gate == GATE_ANY || turned(gate, before, now, fl))) {
                    if (run_occurrence(c, fn, nids, id1, id0)) return 1;
                }
            }
            /* counters watching this slot: [n, (ci, n_masks (-1: any change), masks*)*] */
            const i64 *w = P + P[P[H_WATCH] + slot];
            const i64 *p = w + 1;
            for (i64 e = 0; e < w[0]; e++) {
                i64 ci = p[0];
                i64 nm = p[1];
                const i64 *ms = p + 2;
                p += 2 + (nm > 0 ? nm : 0);
                if (nm >= 0 && before != -1) {
                    int moved = 0;
                    for (i64 q = 0; q < nm; q++)
                        if (((before & ms[q]) != 0) != ((now & ms[q]) != 0)) { moved = 1; break; }
                    if (!moved) continue;
                }
                /* Its comparisons run again even where the interval stays: what they
                 * enforce reads each term's status and values, not the interval alone. */
                recompute(c, ci);
                i64 lo = counter_rec(P, ci)[2];
                if (!c->pending[lo]) {
                    c->pending[lo] = 1;
                    c->pending_old[lo] = -1;
                    c->queue[c->qlen++] = lo;
                }
            }
        } else if (slot >= base) {
            i64 ci = (slot - base) / 2;
            const i64 *cr = counter_rec(P, ci);
            const i64 *cl = P + cr[5];
            int nids = (int)cr[6];
            for (i64 e = 0; e < cl[0]; e++) {
                if (run_occurrence(c, cl[1 + e], nids, nids > 0 ? cr[7] : 0,
                                   nids > 1 ? cr[8] : 0))
                    return 1;
            }
        }
    }
    return 0;
}

/* Propagate from the changed slots (and the root checks when asked) to a fixpoint.
 * Returns 0, 1 on a dead end (out[0] = slot, out[1] = constraint), 2 when the fired list
 * overflowed (it is sized for every grounding of every trigger: a bug). out[2] = number of
 * fired triggers, FIRED_WIDTH words each in `fired`. */
int partita_propagate(const i64 *P, i64 *vec, const i64 *changed, int n_changed, int root,
                      i64 *scratch, char *pending, i64 *fired, int max_fired, i64 *out) {
    Ctx c;
    i64 n = P[H_NSLOTS];
    c.P = P;
    c.nobj = P[H_NOBJ];
    c.absent = P[H_ABSENT];
    c.vec = vec;
    c.queue = scratch;
    c.pending_old = scratch + n;
    c.pending = pending;
    memset(pending, 0, (size_t)n);
    c.used = pending + n;
    memset(c.used, 0, (size_t)c.nobj);
    c.qlen = 0;
    c.fired = fired;
    c.nfired = 0;
    c.max_fired = max_fired;
    c.overflow = 0;
    c.dead_slot = -1;
    c.dead_kid = -1;
    for (int i = 0; i < n_changed; i++) {
        i64 s = changed[i];
        if (!c.pending[s]) {
            c.pending[s] = 1;
            c.pending_old[s] = -1;
            c.queue[c.qlen++] = s;
        }
    }
    /* The Python engine pops from the end of the list of changed slots: same order. */
    int status = 0;
    if (root) {
        const i64 *rl = P + P[H_ROOT];
        for (i64 e = 0; e < rl[0] && !status; e++)
            status = run_occurrence(&c, rl[1 + e], 0, 0, 0);
    }
    if (!status) status = process(&c);
    out[0] = c.dead_slot;
    out[1] = c.dead_kid;
    out[2] = c.nfired;
    if (status) return 1;
    return c.overflow ? 2 : 0;
}

/* Recompute every counter's interval (an initial vector). */
void partita_recompute_all(const i64 *P, i64 *vec) {
    Ctx c;
    memset(&c, 0, sizeof c);
    c.P = P;
    c.nobj = P[H_NOBJ];
    c.absent = P[H_ABSENT];
    c.vec = vec;
    for (i64 ci = 0; ci < P[H_NCOUNTERS]; ci++) recompute(&c, ci);
}

/* The slots of `order` whose domain holds more than one value, in that order; returns how
 * many (at most `limit`: a descent only needs the first). */
int partita_open_slots(const i64 *vec, const i64 *order, int n, i64 *out, int limit) {
    int k = 0;
    for (int i = 0; i < n && k < limit; i++) {
        i64 d = vec[order[i]];
        if (d & (d - 1)) out[k++] = order[i];
    }
    return k;
}

/* Meet the domains carried from another layout: vec[pairs[2i]] &= old[pairs[2i + 1]]. */
void partita_carry(i64 *vec, const i64 *old, const i64 *pairs, int n) {
    for (int i = 0; i < n; i++) vec[pairs[2 * i]] &= old[pairs[2 * i + 1]];
}
