/* nvdd's native CPU kernels, compiled on first use by nvdd_plugins/native/build.py.
 *
 * Plain C on raw arrays (no Python or torch headers), so a compile takes well under a second.
 * Built with -ffp-contract=off: every product and sum is rounded as torch's elementwise ops
 * round it, in the same order, so the neighbour lists equal those of the vectorised torch code
 * they replace, and the LJ sums differ from its segment sums only in their rounding.
 * Each kernel exists for double (suffix _f64) and float (_f32).
 */
#ifdef __linux__
#define _DEFAULT_SOURCE
#include <sys/mman.h>
#endif
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Ask the kernel to back the 2 MiB-aligned interior of a large, not yet touched buffer with
 * huge pages (Linux with transparent huge pages in "madvise" mode): its first touch then
 * faults once per 2 MiB instead of once per 4 KiB. A hint only; elsewhere a no-op. */
void nvdd_advise_huge(void *start, int64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t lo = ((uintptr_t)start + huge - 1) & ~(huge - 1);
    uintptr_t hi = ((uintptr_t)start + (uintptr_t)bytes) & ~(huge - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)start;
    (void)bytes;
#endif
}

/* The periodic images of geometry/cell_grid.py's with_periodic_images: for each of `n` atoms
 * (wrapped fractional coordinates `frac`, wrapped positions `wrapped`, lattice `image` removed
 * by wrapping) and each lattice shift (x, y, z major to minor, within `half[k]` of 0 per axis)
 * whose fractional coordinate on every periodic axis k lies within (lo[k], hi[k]) (the shift 0
 * always), one point: its atom, `unit` = shift - image[atom], and `pos` = wrapped[atom] +
 * shift @ cell (products and sums in torch's order); `central` (n) each atom's unshifted
 * point. With `atom` NULL only counts the points. Returns the number of points. */
#define PERIODIC_IMAGES(SUFFIX, REAL)                                                         \
    int64_t nvdd_periodic_images_##SUFFIX(                                                    \
        int64_t n, const REAL *frac, const REAL *wrapped, const int64_t *image,              \
        const REAL *cell, const int64_t *half, const int64_t *periodic, const REAL *lo,      \
        const REAL *hi, int64_t *atom, int64_t *unit, REAL *pos, int64_t *central) {         \
        int64_t m = 0;                                                                        \
        for (int64_t a = 0; a < n; ++a) {                                                     \
            for (int64_t sx = -half[0]; sx <= half[0]; ++sx) {                                \
                const REAL fx = frac[3 * a] + (REAL)sx;                                       \
                if (sx && periodic[0] && !(fx > lo[0] && fx < hi[0])) continue;               \
                for (int64_t sy = -half[1]; sy <= half[1]; ++sy) {                            \
                    const REAL fy = frac[3 * a + 1] + (REAL)sy;                               \
                    if (sy && periodic[1] && !(fy > lo[1] && fy < hi[1])) continue;           \
                    for (int64_t sz = -half[2]; sz <= half[2]; ++sz, ++m) {                   \
                        const REAL fz = frac[3 * a + 2] + (REAL)sz;                           \
                        if (sz && periodic[2] && !(fz > lo[2] && fz < hi[2])) {               \
                            --m;                                                              \
                            continue;                                                         \
                        }                                                                     \
                        if (!atom) continue;                                                  \
                        const int64_t shift[3] = {sx, sy, sz};                                \
                        if (!(sx | sy | sz)) central[a] = m;                                  \
                        atom[m] = a;                                                          \
                        for (int b = 0; b < 3; ++b) {                                         \
                            unit[3 * m + b] = shift[b] - image[3 * a + b];                    \
                            REAL t = (REAL)sx * cell[b];                                      \
                            t = t + (REAL)sy * cell[3 + b];                                   \
                            t = t + (REAL)sz * cell[6 + b];                                   \
                            pos[3 * m + b] = wrapped[3 * a + b] + t;                          \
                        }                                                                     \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        return m;                                                                             \
    }

PERIODIC_IMAGES(f64, double)
PERIODIC_IMAGES(f32, float)

/* The bin grid of geometry/cell_grid.py's build_bin_grid for `m` points on a given grid
 * (lowest corner `lo`, bins per Å `scale`, Å per bin `width`, `shape` bins per axis; at most
 * 4 m + 1024 bins): `order` (m) the points sorted stably by bin (x, y, z major to minor),
 * `own_slot` (q) each query point's place in that order, and per query (`central`: its point)
 * and stencil column (x, y within `stencil` bins of its own; `columns` of them) the first
 * sorted slot and the number of points of the column's bins within the chord of the query's
 * `reach` sphere. Returns 0, or -1 when memory runs out. */
#define BIN_GRID(SUFFIX, REAL)                                                                \
    int64_t nvdd_bin_grid_##SUFFIX(                                                           \
        int64_t m, const REAL *pos, int64_t n_queries, const int64_t *central, const REAL *lo, \
        const REAL *scale, const REAL *width, int64_t s0, int64_t s1, int64_t s2,             \
        int64_t stencil, REAL reach, int64_t *order, int64_t *own_slot, int32_t *start,       \
        int32_t *count) {                                                                     \
        const int64_t shape[3] = {s0, s1, s2}, n_bins = s0 * s1 * s2;                         \
        int64_t *key = malloc((size_t)(m > 0 ? m : 1) * sizeof(int64_t));                     \
        int64_t *bin_end = calloc((size_t)n_bins + 1, sizeof(int64_t));                       \
        int64_t *slot = malloc((size_t)(m > 0 ? m : 1) * sizeof(int64_t));                    \
        if (!key || !bin_end || !slot) {                                                      \
            free(key);                                                                        \
            free(bin_end);                                                                    \
            free(slot);                                                                       \
            return -1;                                                                        \
        }                                                                                     \
        for (int64_t p = 0; p < m; ++p) {                                                     \
            int64_t c[3];                                                                     \
            for (int k = 0; k < 3; ++k) {                                                     \
                REAL f = floor((pos[3 * p + k] - lo[k]) * scale[k]);                          \
                int64_t b = (int64_t)f;                                                       \
                c[k] = b < 0 ? 0 : (b > shape[k] - 1 ? shape[k] - 1 : b);                     \
            }                                                                                 \
            key[p] = (c[0] * s1 + c[1]) * s2 + c[2];                                          \
            ++bin_end[key[p] + 1];                                                            \
        }                                                                                     \
        for (int64_t b = 0; b < n_bins; ++b) bin_end[b + 1] += bin_end[b];                    \
        /* counting sort: bin_end[b] is now the first slot of bin b; advance while filling */ \
        for (int64_t p = 0; p < m; ++p) {                                                     \
            slot[p] = bin_end[key[p]]++;                                                      \
            order[slot[p]] = p;                                                               \
        }                                                                                     \
        /* bin_end[b] is now the end of bin b, and the start of bin b is bin_end[b - 1] */    \
        const int64_t span_x = stencil < s0 - 1 ? stencil : s0 - 1;                           \
        const int64_t span_y = stencil < s1 - 1 ? stencil : s1 - 1;                           \
        const int64_t columns = (2 * span_x + 1) * (2 * span_y + 1);                          \
        const REAL reach2 = reach * reach;                                                    \
        for (int64_t q = 0; q < n_queries; ++q) {                                             \
            const int64_t p = central[q];                                                     \
            own_slot[q] = slot[p];                                                            \
            REAL f[3];                                                                        \
            int64_t centre[3];                                                                \
            for (int k = 0; k < 3; ++k) f[k] = (pos[3 * p + k] - lo[k]) * scale[k];           \
            centre[0] = key[p] / (s1 * s2);                                                   \
            centre[1] = (key[p] / s2) % s1;                                                   \
            centre[2] = key[p] % s2;                                                          \
            int64_t column = q * columns;                                                     \
            for (int64_t dx = -span_x; dx <= span_x; ++dx) {                                  \
                int64_t x = centre[0] + dx;                                                   \
                const int valid_x = x >= 0 && x < s0;                                         \
                x = x < 0 ? 0 : (x > s0 - 1 ? s0 - 1 : x);                                    \
                REAL gx = (REAL)x - f[0], hx = f[0] - ((REAL)x + (REAL)1.0);                  \
                gx = (gx > hx ? gx : hx);                                                     \
                gx = (gx > 0 ? gx : (REAL)0.0) * width[0];                                    \
                for (int64_t dy = -span_y; dy <= span_y; ++dy, ++column) {                    \
                    int64_t y = centre[1] + dy;                                               \
                    const int valid_y = y >= 0 && y < s1;                                     \
                    y = y < 0 ? 0 : (y > s1 - 1 ? s1 - 1 : y);                                \
                    REAL gy = (REAL)y - f[1], hy = f[1] - ((REAL)y + (REAL)1.0);              \
                    gy = (gy > hy ? gy : hy);                                                 \
                    gy = (gy > 0 ? gy : (REAL)0.0) * width[1];                                \
                    const REAL gap2 = gx * gx + gy * gy;                                      \
                    if (!(valid_x && valid_y && gap2 < reach2)) {                             \
                        start[column] = 0;                                                    \
                        count[column] = 0;                                                    \
                        continue;                                                             \
                    }                                                                         \
                    REAL rest = reach2 - gap2;                                                \
                    const REAL half_chord = sqrt(rest > 0 ? rest : (REAL)0.0) * scale[2];     \
                    REAL lo_z = floor(f[2] - half_chord), hi_z = floor(f[2] + half_chord);    \
                    const REAL top = (REAL)(s2 - 1);                                          \
                    lo_z = lo_z < 0 ? 0 : (lo_z > top ? top : lo_z);                          \
                    hi_z = hi_z < 0 ? 0 : (hi_z > top ? top : hi_z);                          \
                    const int64_t base = (x * s1 + y) * s2;                                   \
                    const int64_t first = base + (int64_t)lo_z, last = base + (int64_t)hi_z;  \
                    const int64_t begin = first > 0 ? bin_end[first - 1] : 0;                 \
                    start[column] = (int32_t)begin;                                           \
                    count[column] = (int32_t)(bin_end[last] - begin);                         \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        free(key);                                                                            \
        free(bin_end);                                                                        \
        free(slot);                                                                           \
        return 0;                                                                             \
    }

BIN_GRID(f64, double)
BIN_GRID(f32, float)

/* Neighbour-list candidates of queries q0 <= q < q1 (see geometry/neighbor_list.py).
 *
 * Query q scans, for each of its `columns` stencil columns c, the bin-sorted points
 * start[q, c] .. start[q, c] + count[q, c]. A point within `reach` of the query (on the
 * extended positions) and not the query's own point is an edge candidate (i = q, j its atom,
 * unit = its lattice units + image[i]); it is an edge when i or j is below `touching` and
 * |positions[j] - positions[i] + unit @ cell| < cutoff. The edges are written in scan order
 * (grouped by i ascending) into outputs with room for every candidate; `out_i` has room for
 * two rows of candidates and ends as the (2, n) edge index (j moved behind i). Returns n.
 */
#define SCREEN 64
#define EPSILON_f64 2.220446049250313e-16
#define EPSILON_f32 1.1920929e-07f
#define NEIGHBOR_PAIRS(SUFFIX, REAL)                                                          \
    int64_t nvdd_neighbor_pairs_##SUFFIX(                                                     \
        int64_t q0, int64_t q1, int64_t columns, int64_t touching, const int32_t *start, const int32_t *count,  \
        const REAL *sorted_pos, const REAL *query_pos, const int64_t *sorted_atom,            \
        const int64_t *sorted_unit, const int64_t *own_slot, const int64_t *image,            \
        const REAL *positions, const REAL *cell, REAL reach, REAL cutoff, int64_t *out_i,     \
        int64_t *out_unit, REAL *out_shift) {                                                 \
        const REAL reach2 = reach * reach;                                                    \
        const REAL near = cutoff * ((REAL)1.0 - (REAL)16.0 * EPSILON_##SUFFIX);               \
        const REAL far = cutoff * ((REAL)1.0 + (REAL)16.0 * EPSILON_##SUFFIX);                \
        const REAL inner2 = near * near, outer2 = far * far;                                  \
        int64_t room = 0, n = 0;                                                              \
        for (int64_t k = q0 * columns; k < q1 * columns; ++k) room += count[k];               \
        int64_t *out_j = out_i + room;                                                        \
        for (int64_t q = q0; q < q1; ++q) {                                                   \
            const REAL qx = query_pos[3 * q], qy = query_pos[3 * q + 1],                      \
                       qz = query_pos[3 * q + 2];                                             \
            const REAL *xi = positions + 3 * q;                                               \
            const int64_t own = own_slot[q];                                                  \
            for (int64_t c = 0; c < columns; ++c) {                                           \
                const int64_t first = start[q * columns + c];                                 \
                const int64_t last = first + count[q * columns + c];                          \
                for (int64_t block = first; block < last; block += SCREEN) {                  \
                    /* screen a block of the column without branches, then take the hits */  \
                    const int64_t end = block + SCREEN < last ? block + SCREEN : last;        \
                    int64_t hits[SCREEN], n_hits = 0;                                         \
                    for (int64_t p = block; p < end; ++p) {                                   \
                        const REAL dx = sorted_pos[3 * p] - qx, dy = sorted_pos[3 * p + 1] - qy, \
                                   dz = sorted_pos[3 * p + 2] - qz;                           \
                        hits[n_hits] = p;                                                     \
                        n_hits += (dx * dx + dy * dy + dz * dz < reach2) & (p != own);        \
                    }                                                                         \
                    for (int64_t h = 0; h < n_hits; ++h) {                                    \
                        const int64_t p = hits[h], j = sorted_atom[p];                        \
                        if (q >= touching && j >= touching) continue;                         \
                        int64_t u[3];                                                         \
                        REAL s[3] = {0, 0, 0}, v[3];                                          \
                        for (int a = 0; a < 3; ++a) u[a] = sorted_unit[3 * p + a] + image[3 * q + a]; \
                        if (cell && (u[0] | u[1] | u[2])) {                                   \
                            for (int b = 0; b < 3; ++b) {                                     \
                                REAL t = (REAL)u[0] * cell[b];                                \
                                t = t + (REAL)u[1] * cell[3 + b];                             \
                                s[b] = t + (REAL)u[2] * cell[6 + b];                          \
                            }                                                                 \
                        }                                                                     \
                        const REAL *xj = positions + 3 * j;                                   \
                        for (int a = 0; a < 3; ++a) v[a] = (xj[a] - xi[a]) + s[a];            \
                        const REAL d2 = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];              \
                        /* sqrt only near the cutoff: elsewhere its comparison is certain */  \
                        if (!(d2 < inner2 || (d2 < outer2 && sqrt(d2) < cutoff))) continue;  \
                        out_i[n] = q;                                                         \
                        out_j[n] = j;                                                         \
                        for (int a = 0; a < 3; ++a) {                                         \
                            out_unit[3 * n + a] = u[a];                                       \
                            out_shift[3 * n + a] = s[a];                                      \
                        }                                                                     \
                        ++n;                                                                  \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        memmove(out_i + n, out_j, (size_t)n * sizeof(int64_t));                               \
        return n;                                                                             \
    }

NEIGHBOR_PAIRS(f64, double)
NEIGHBOR_PAIRS(f32, float)

/* Lennard-Jones per-atom energies (n), forces (n, 3) and virials (n, 3, 3), zeroed by the
 * caller, from a full list of `n_edges` edges (i = edge_i[e], j = edge_j[e], r_ij = x[j] -
 * x[i] + shifts[e]); each edge adds to atom i only. `virials` may be NULL: then they are not
 * computed (the energies and forces are the same). The arithmetic is kernels/lennard_jones.py's
 * term by term; a run of edges with the same i is summed in registers, in edge order, and
 * added to the atom's sums at its end. Returns -1, or the first edge with an index outside
 * [0, n) (then stops). */
#define LENNARD_JONES(SUFFIX, REAL)                                                           \
    static void lj_flush_##SUFFIX(int64_t i, const REAL *acc, REAL *energies, REAL *forces,   \
                                  REAL *virials) {                                            \
        energies[i] += acc[0];                                                                \
        for (int a = 0; a < 3; ++a) forces[3 * i + a] += acc[1 + a];                          \
        if (virials)                                                                          \
            for (int a = 0; a < 9; ++a) virials[9 * i + a] += acc[4 + a];                     \
    }                                                                                         \
    int64_t nvdd_lennard_jones_##SUFFIX(int64_t n, int64_t n_edges, const REAL *x,            \
                                        const int64_t *edge_i, const int64_t *edge_j,         \
                                        const REAL *shifts, REAL epsilon, REAL sigma,         \
                                        REAL cutoff, REAL offset, REAL *energies,             \
                                        REAL *forces, REAL *virials) {                        \
        const REAL cutoff2 = cutoff * cutoff, sigma2 = sigma * sigma;                         \
        const REAL four_eps = (REAL)4.0 * epsilon, minus_24_eps = (REAL)-24.0 * epsilon;      \
        REAL acc[13] = {0};                                                                   \
        const int with_virials = virials != NULL;                                             \
        int64_t current = -1;                                                                 \
        for (int64_t e = 0; e < n_edges; ++e) {                                               \
            const int64_t i = edge_i[e], j = edge_j[e];                                       \
            if (i < 0 || i >= n || j < 0 || j >= n) {                                         \
                if (current >= 0) lj_flush_##SUFFIX(current, acc, energies, forces, virials); \
                return e;                                                                     \
            }                                                                                 \
            if (i != current) {                                                               \
                if (current >= 0) lj_flush_##SUFFIX(current, acc, energies, forces, virials); \
                for (int a = 0; a < 13; ++a) acc[a] = (REAL)0.0;                              \
                current = i;                                                                  \
            }                                                                                 \
            REAL r[3];                                                                        \
            for (int a = 0; a < 3; ++a) r[a] = (x[3 * j + a] - x[3 * i + a]) + shifts[3 * e + a]; \
            const REAL r2 = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];                          \
            if (!(r2 < cutoff2)) continue;                                                    \
            const REAL s = sigma2 / r2;                                                       \
            const REAL c6 = s * s * s, c12 = c6 * c6;                                         \
            acc[0] += (four_eps * (c12 - c6) - offset) * (REAL)0.5;                           \
            const REAL dphi_over_r = minus_24_eps * ((REAL)2.0 * c12 - c6) / r2;              \
            for (int a = 0; a < 3; ++a) acc[1 + a] += dphi_over_r * r[a];                     \
            if (!with_virials) continue;                                                      \
            for (int a = 0; a < 3; ++a) {                                                     \
                const REAL half = (REAL)0.5 * (dphi_over_r * r[a]);                           \
                for (int b = 0; b < 3; ++b) acc[4 + 3 * a + b] += half * r[b];                \
            }                                                                                 \
        }                                                                                     \
        if (current >= 0) lj_flush_##SUFFIX(current, acc, energies, forces, virials);         \
        return -1;                                                                            \
    }

LENNARD_JONES(f64, double)
LENNARD_JONES(f32, float)
