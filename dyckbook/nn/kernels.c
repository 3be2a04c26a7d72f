/* Fused CPU kernels for short rows: attention (forward, backward) and residual + LayerNorm.
 *
 * dyckbook.kernels compiles this file with the machine's C compiler on first use and calls it
 * through ctypes; dyckbook.blocks falls back to torch where it is not available. At the grid's
 * size (rows of 6-22 tokens, heads of 16) torch spends most of an attention layer in per-call
 * overhead of its flash kernel and small matrix products; here one pass over each (row, head)
 * does the work in registers. Attention reads and writes float32 or bfloat16 (the arithmetic is
 * float32's). Vectors are GCC/Clang vector extensions (8 floats), so the same source builds for
 * AVX2, AVX-512 or NEON. Every function returns 0, or -1 for shapes it does not handle (the
 * caller then uses torch).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define W 8          /* floats per vector */
#define TMAX 256     /* most keys (and queries) per row */
#define BMAX (TMAX / W)
#define DMAX 256     /* widest head, widest LayerNorm row */
typedef float vf __attribute__((vector_size(4 * W)));
typedef int32_t vi __attribute__((vector_size(4 * W)));
#define INLINE static inline __attribute__((always_inline))

INLINE vf splat(float x) { return (vf){x, x, x, x, x, x, x, x}; }
INLINE vf load(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }
INLINE void store(float *p, vf v) { memcpy(p, &v, sizeof v); }
INLINE vf pick(vi m, vf a, vf b) { return (vf)(((vi)a & m) | ((vi)b & ~m)); }
#if defined(__clang__)
#define SHUFFLE(v, ...) __builtin_shufflevector(v, v, __VA_ARGS__)
#else
#define SHUFFLE(v, ...) __builtin_shuffle(v, (vi){__VA_ARGS__})
#endif
/* Horizontal sum, max and or, in every lane (three swaps of halves, quarters, neighbours). */
INLINE vf vsum(vf v) {
    v += SHUFFLE(v, 4, 5, 6, 7, 0, 1, 2, 3);
    v += SHUFFLE(v, 2, 3, 0, 1, 6, 7, 4, 5);
    return v + SHUFFLE(v, 1, 0, 3, 2, 5, 4, 7, 6);
}
INLINE vf vmax(vf v) {
    vf u = SHUFFLE(v, 4, 5, 6, 7, 0, 1, 2, 3);
    v = pick(u > v, u, v);
    u = SHUFFLE(v, 2, 3, 0, 1, 6, 7, 4, 5);
    v = pick(u > v, u, v);
    u = SHUFFLE(v, 1, 0, 3, 2, 5, 4, 7, 6);
    return pick(u > v, u, v);
}
INLINE vi vor(vi v) {
    v |= SHUFFLE(v, 4, 5, 6, 7, 0, 1, 2, 3);
    v |= SHUFFLE(v, 2, 3, 0, 1, 6, 7, 4, 5);
    return v | SHUFFLE(v, 1, 0, 3, 2, 5, 4, 7, 6);
}
INLINE float hsum(vf v) { return vsum(v)[0]; }

/* exp(x) for x <= 0, within about 2 ulp (Cephes' polynomial); below -87 it is about 0. */
INLINE vf vexp(vf x) {
    x = pick(x < splat(-87.0f), splat(-87.0f), x);
    vf n = (x * splat(1.44269504088896341f) + splat(12582912.0f)) - splat(12582912.0f);
    vf r = (x - n * splat(0.693359375f)) + n * splat(2.12194440e-4f);
    vf y = splat(1.9875691500e-4f);
    y = y * r + splat(1.3981999507e-3f);
    y = y * r + splat(8.3334519073e-3f);
    y = y * r + splat(4.1665795894e-2f);
    y = y * r + splat(1.6666665459e-1f);
    y = y * r + splat(5.0000001201e-1f);
    y = y * r * r + r + splat(1.0f);
    vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
    return y * (vf)bits;
}

/* x (d floats) times the columns b*W .. b*W+W-1 of a transposed block (d rows of stride tkp):
   W dot products at once, in four partial sums held in registers. */
INLINE vf dot_keys(const float *x, const float *col, int64_t tkp, int64_t d) {
    vf s1 = splat(0.0f), s2 = splat(0.0f), s3 = splat(0.0f), s4 = splat(0.0f);
    for (int64_t e = 0; e < d; e += 4, col += 4 * tkp) {
        s1 += splat(x[e]) * load(col);
        s2 += splat(x[e + 1]) * load(col + tkp);
        s3 += splat(x[e + 2]) * load(col + 2 * tkp);
        s4 += splat(x[e + 3]) * load(col + 3 * tkp);
    }
    return (s1 + s2) + (s3 + s4);
}

/* Copy a tk x d block (row stride ks) to out[e * tkp + j], zero-padded to tkp keys. */
INLINE void transpose(float *out, const float *x, int64_t ks, int64_t tk, int64_t tkp,
                      int64_t d) {
    for (int64_t e = 0; e < d; e++) {
        for (int64_t j = 0; j < tk; j++) out[e * tkp + j] = x[j * ks + e];
        for (int64_t j = tk; j < tkp; j++) out[e * tkp + j] = 0.0f;
    }
}

/* One (row, head): q (tq x d, row stride qs), k and v (tk x d, stride ks), optional key mask
 * (tk), optional dropout multipliers (tq x tkp); writes z (tq x d, stride zs) and the
 * probabilities p (tq x tkp, before dropout). Query i sees key j if mask[j] and, when causal,
 * j <= pos(i) (qpos if given, else i + tk - tq); a query that sees no key sees every key. */
INLINE void forward_one(const float *q, int64_t qs, const float *k, const float *v, int64_t ks,
                        const uint8_t *mask, const int64_t *qpos, int causal, const float *drop,
                        float *z, int64_t zs, float *p, int64_t tq, int64_t tk, const int64_t nc,
                        float scale, float *kt) {
    const int64_t nb = (tk + W - 1) / W, tkp = nb * W, d = nc * W;
    const vi lane = {0, 1, 2, 3, 4, 5, 6, 7};
    vi keys[BMAX];
    int64_t last = 0;  /* one past the last key the mask shows */
    transpose(kt, k, ks, tk, tkp, d);
    for (int64_t b = 0; b < nb; b++)
        for (int l = 0; l < W; l++) {
            int64_t j = b * W + l;
            int shown = j < tk && (!mask || mask[j]);
            keys[b][l] = shown ? -1 : 0;
            last = shown ? j + 1 : last;
        }
    for (int64_t i = 0; i < tq; i++) {
        const int32_t pos = (int32_t)(qpos ? *qpos : i + tk - tq);
        vi vis[BMAX], any = {0};
        for (int64_t b = 0; b < nb; b++) {
            vis[b] = keys[b];
            if (causal) vis[b] &= (lane + (int32_t)(b * W)) <= pos;
            any |= vis[b];
        }
        const int none = vor(any)[0] == 0;
        if (none)
            for (int64_t b = 0; b < nb; b++) vis[b] = (lane + (int32_t)(b * W)) < (int32_t)tk;
        /* keys from `end` on are hidden: their weight is 0 */
        const int64_t end = none ? tk : causal && pos + 1 < last ? pos + 1 : last;
        vf s[BMAX], top = splat(-3.0e38f);
        for (int64_t b = 0; b < nb; b++) {
            s[b] = pick(vis[b], dot_keys(q + i * qs, kt + b * W, tkp, d) * splat(scale),
                        splat(-3.0e38f));
            top = pick(s[b] > top, s[b], top);
        }
        vf m = vmax(top), total = splat(0.0f);
        for (int64_t b = 0; b < nb; b++) {
            s[b] = vor(vis[b])[0] ? pick(vis[b], vexp(s[b] - m), splat(0.0f)) : splat(0.0f);
            total += s[b];
        }
        vf inv = splat(1.0f) / vsum(total);
        float w[TMAX];
        for (int64_t b = 0; b < nb; b++) {
            s[b] *= inv;
            if (p) store(p + i * tkp + b * W, s[b]);
            store(w + b * W, drop ? s[b] * load(drop + i * tkp + b * W) : s[b]);
        }
        vf acc[DMAX / W], acc2[DMAX / W];
        for (int64_t c = 0; c < nc; c++) acc[c] = acc2[c] = splat(0.0f);
        int64_t j = 0;
        for (; j + 1 < end; j += 2) {
            vf wj = splat(w[j]), wk = splat(w[j + 1]);
            for (int64_t c = 0; c < nc; c++) {
                acc[c] += wj * load(v + j * ks + c * W);
                acc2[c] += wk * load(v + (j + 1) * ks + c * W);
            }
        }
        if (j < end)
            for (int64_t c = 0; c < nc; c++) acc[c] += splat(w[j]) * load(v + j * ks + c * W);
        for (int64_t c = 0; c < nc; c++) store(z + i * zs + c * W, acc[c] + acc2[c]);
    }
}

/* The gradients of forward_one's inputs q, k, v, written with their layouts (not added). */
INLINE void backward_one(const float *q, int64_t qs, const float *k, const float *v, int64_t ks,
                         const float *p, const float *drop, const float *dz, int64_t zs,
                         float *dq, float *dk, float *dv, int64_t tq, int64_t tk,
                         const int64_t nc, float scale, float *vt, float *g, float *a) {
    const int64_t nb = (tk + W - 1) / W, tkp = nb * W, d = nc * W;
    transpose(vt, v, ks, tk, tkp, d);
    for (int64_t i = 0; i < tq; i++) {
        const float *w = p + i * tkp, *keep = drop ? drop + i * tkp : 0;
        vf dp[BMAX], dot = splat(0.0f);
        for (int64_t b = 0; b < nb; b++) {
            dp[b] = dot_keys(dz + i * zs, vt + b * W, tkp, d);
            if (keep) dp[b] *= load(keep + b * W);
            dot += load(w + b * W) * dp[b];
        }
        vf r = vsum(dot);
        for (int64_t b = 0; b < nb; b++) {
            vf wb = load(w + b * W);
            store(g + i * tkp + b * W, wb * (dp[b] - r) * splat(scale));
            if (keep) store(a + i * tkp + b * W, wb * load(keep + b * W));
        }
        int64_t end = tk;
        while (end > 0 && w[end - 1] == 0.0f) end--;
        vf acc[DMAX / W];
        for (int64_t c = 0; c < nc; c++) acc[c] = splat(0.0f);
        for (int64_t j = 0; j < end; j++) {
            vf gj = splat(g[i * tkp + j]);
            for (int64_t c = 0; c < nc; c++) acc[c] += gj * load(k + j * ks + c * W);
        }
        for (int64_t c = 0; c < nc; c++) store(dq + i * qs + c * W, acc[c]);
    }
    const float *used = drop ? a : p;  /* the weights that multiplied v */
    for (int64_t j = 0; j < tk; j++) {
        vf ak[DMAX / W], av[DMAX / W];
        for (int64_t c = 0; c < nc; c++) ak[c] = av[c] = splat(0.0f);
        int64_t first = 0;
        while (first < tq && p[first * tkp + j] == 0.0f) first++;
        for (int64_t i = first; i < tq; i++) {
            vf gij = splat(g[i * tkp + j]), aij = splat(used[i * tkp + j]);
            for (int64_t c = 0; c < nc; c++) {
                ak[c] += gij * load(q + i * qs + c * W);
                av[c] += aij * load(dz + i * zs + c * W);
            }
        }
        for (int64_t c = 0; c < nc; c++) {
            store(dk + j * ks + c * W, ak[c]);
            store(dv + j * ks + c * W, av[c]);
        }
    }
}

/* Head widths of 8, 16, 32 and 64 get code with the width fixed (accumulators in registers). */
#define BY_WIDTH(CALL)                                                                        \
    switch (nc) {                                                                             \
    case 1: CALL(1); break;                                                                   \
    case 2: CALL(2); break;                                                                   \
    case 4: CALL(4); break;                                                                   \
    case 8: CALL(8); break;                                                                   \
    default: CALL(nc);                                                                        \
    }

static int unsupported(int64_t tq, int64_t tk, int64_t d_head) {
    return tq < 1 || tk < 1 || tq > TMAX || tk > TMAX || d_head < W || d_head % W ||
           d_head > DMAX;
}

/* bfloat16 <-> float: the high half of the float's bits, rounded to nearest even. */
INLINE float from_bf16(uint16_t h) {
    union { uint32_t u; float f; } x = {(uint32_t)h << 16};
    return x.f;
}
INLINE uint16_t to_bf16(float f) {
    union { float f; uint32_t u; } x = {f};
    if (f != f) return 0x7FC0;  /* NaN stays NaN */
    return (uint16_t)((x.u + 0x7FFF + ((x.u >> 16) & 1)) >> 16);
}

/* n rows of d elements (row stride `stride`) of a float or bfloat16 tensor -> floats (stride d),
   and back. */
INLINE void gather(float *out, const void *x, int64_t stride, int64_t n, int64_t d) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t e = 0; e < d; e++)
            out[i * d + e] = from_bf16(((const uint16_t *)x)[i * stride + e]);
}
INLINE void scatter(void *out, int64_t stride, const float *x, int64_t n, int64_t d) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t e = 0; e < d; e++) ((uint16_t *)out)[i * stride + e] = to_bf16(x[i * d + e]);
}

/* Element `at` of a float (bf16 = 0) or bfloat16 (bf16 = 1) array, as a byte address. */
#define AT(x, at) ((char *)(x) + (at) * (bf16 ? 2 : 4))

/* One row and head of bfloat16 q, k and v (at element offsets qo, ko) as floats. */
INLINE void gather_qkv(float *qb, float *kb, float *vb, const void *q, const void *k,
                       const void *v, int64_t qo, int64_t ko, int64_t q_row, int64_t kv_row,
                       int64_t tq, int64_t tk, int64_t d) {
    const int bf16 = 1;
    gather(qb, AT(q, qo), q_row, tq, d);
    gather(kb, AT(k, ko), kv_row, tk, d);
    gather(vb, AT(v, ko), kv_row, tk, d);
}

/* Attention of n rows of h heads. Element (row r, position i, head h, dim e) of q is at
 * q[(r * tq + i) * q_row + h * d_head + e]; k and v likewise with tk and kv_row; z is
 * (n, tq, heads * d_head); q, k, v and z are float, or bfloat16 if bf16 (the arithmetic is in
 * float either way). p (NULL: not kept) and drop (optional) are float (n, heads, tq, tkp), tkp
 * being tk rounded up to a multiple of 8 (keys from tk on have probability 0); mask (optional)
 * is (n, tk); qpos (optional) is (n,), the position of each row's one query. */
int attention_forward(const void *q, int64_t q_row, const void *k, const void *v,
                      int64_t kv_row, const uint8_t *mask, const int64_t *qpos, int causal,
                      const float *drop, void *z, float *p, int64_t n, int64_t tq, int64_t tk,
                      int64_t heads, int64_t d_head, float scale, int bf16) {
    if (unsupported(tq, tk, d_head)) return -1;
    const int64_t width = heads * d_head, nc = d_head / W, tkp = (tk + W - 1) / W * W;
    const int64_t d = d_head;
    float *kt = malloc(sizeof(float) * (d * tkp + (bf16 ? (2 * tq + 2 * tk) * d : 0)));
    if (!kt) return -1;
    float *qb = kt + d * tkp, *zb = qb + tq * d, *kb = zb + tq * d, *vb = kb + tk * d;
    for (int64_t r = 0; r < n; r++)
        for (int64_t h = 0; h < heads; h++) {
            const int64_t ph = (r * heads + h) * tq * tkp, qo = r * tq * q_row + h * d;
            const int64_t ko = r * tk * kv_row + h * d, zo = r * tq * width + h * d;
            if (bf16) /* this row and head as floats, then as in float */
                gather_qkv(qb, kb, vb, q, k, v, qo, ko, q_row, kv_row, tq, tk, d);
#define FORWARD(NC)                                                                           \
    forward_one(bf16 ? qb : (const float *)q + qo, bf16 ? d : q_row,                          \
                bf16 ? kb : (const float *)k + ko, bf16 ? vb : (const float *)v + ko,         \
                bf16 ? d : kv_row, mask ? mask + r * tk : 0, qpos ? qpos + r : 0, causal,     \
                drop ? drop + ph : 0, bf16 ? zb : (float *)z + zo, bf16 ? d : width,          \
                p ? p + ph : 0, tq, tk, NC, scale, kt)
            BY_WIDTH(FORWARD)
            if (bf16) scatter(AT(z, zo), width, zb, tq, d);
        }
    free(kt);
    return 0;
}

/* dq, dk, dv have the layouts and type of q, k, v (they may be views of one tensor, as q, k, v
 * are); dz that of z. */
int attention_backward(const void *q, int64_t q_row, const void *k, const void *v,
                       int64_t kv_row, const float *p, const float *drop, const void *dz,
                       void *dq, void *dk, void *dv, int64_t n, int64_t tq, int64_t tk,
                       int64_t heads, int64_t d_head, float scale, int bf16) {
    if (unsupported(tq, tk, d_head)) return -1;
    const int64_t width = heads * d_head, nc = d_head / W, tkp = (tk + W - 1) / W * W;
    const int64_t d = d_head;
    float *vt = malloc(sizeof(float) * (d * tkp + 2 * tq * tkp
                                        + (bf16 ? (4 * tq + 4 * tk) * d : 0)));
    if (!vt) return -1;
    float *g = vt + d * tkp, *a = g + tq * tkp;
    float *qb = a + tq * tkp, *dzb = qb + tq * d, *dqb = dzb + tq * d, *kb = dqb + tq * d;
    float *vb = kb + tk * d, *dkb = vb + tk * d, *dvb = dkb + tk * d;
    for (int64_t r = 0; r < n; r++)
        for (int64_t h = 0; h < heads; h++) {
            const int64_t qo = r * tq * q_row + h * d, ko = r * tk * kv_row + h * d;
            const int64_t ph = (r * heads + h) * tq * tkp, zo = r * tq * width + h * d;
            if (bf16) {
                gather_qkv(qb, kb, vb, q, k, v, qo, ko, q_row, kv_row, tq, tk, d);
                gather(dzb, AT(dz, zo), width, tq, d);
            }
#define BACKWARD(NC)                                                                          \
    backward_one(bf16 ? qb : (const float *)q + qo, bf16 ? d : q_row,                         \
                 bf16 ? kb : (const float *)k + ko, bf16 ? vb : (const float *)v + ko,        \
                 bf16 ? d : kv_row, p + ph, drop ? drop + ph : 0,                             \
                 bf16 ? dzb : (const float *)dz + zo, bf16 ? d : width,                       \
                 bf16 ? dqb : (float *)dq + qo, bf16 ? dkb : (float *)dk + ko,                \
                 bf16 ? dvb : (float *)dv + ko, tq, tk, NC, scale, vt, g, a)
            BY_WIDTH(BACKWARD)
            if (bf16) {
                scatter(AT(dq, qo), q_row, dqb, tq, d);
                scatter(AT(dk, ko), kv_row, dkb, tk, d);
                scatter(AT(dv, ko), kv_row, dvb, tk, d);
            }
        }
    free(vt);
    return 0;
}

/* out = LayerNorm(x + y) * weight[s] + bias[s] over rows of d floats, rows [s * rows,
 * (s + 1) * rows) belonging to model s; y may be NULL. Saves the normalised rows (xhat) and
 * 1 / std per row for the backward pass, unless they are NULL (no gradient wanted). */
int layer_norm_forward(const float *x, const float *y, const float *weight, const float *bias,
                       float *out, float *xhat, float *rstd, int64_t models, int64_t rows,
                       int64_t d, float eps) {
    if (d < W || d % W || d > DMAX) return -1;
    const int64_t nc = d / W;
    const vf inv_d = splat(1.0f / (float)d);
    for (int64_t s = 0; s < models; s++) {
        vf w[DMAX / W], b[DMAX / W];
        for (int64_t c = 0; c < nc; c++) {
            w[c] = load(weight + s * d + c * W);
            b[c] = load(bias + s * d + c * W);
        }
        for (int64_t r = s * rows; r < (s + 1) * rows; r++) {
            vf h[DMAX / W], sum = splat(0.0f), sq = splat(0.0f);
            for (int64_t c = 0; c < nc; c++) {
                h[c] = load(x + r * d + c * W);
                if (y) h[c] += load(y + r * d + c * W);
                sum += h[c];
            }
            vf mean = splat(hsum(sum)) * inv_d;
            for (int64_t c = 0; c < nc; c++) {
                h[c] -= mean;
                sq += h[c] * h[c];
            }
            const float rs = 1.0f / sqrtf(hsum(sq) / (float)d + eps);
            if (rstd) rstd[r] = rs;
            for (int64_t c = 0; c < nc; c++) {
                vf xh = h[c] * splat(rs);
                if (xhat) store(xhat + r * d + c * W, xh);
                store(out + r * d + c * W, xh * w[c] + b[c]);
            }
        }
    }
    return 0;
}

/* grad_in: the gradient of x + y; grad_weight and grad_bias: (models, d), written. */
int layer_norm_backward(const float *grad, const float *xhat, const float *rstd,
                        const float *weight, float *grad_in, float *grad_weight,
                        float *grad_bias, int64_t models, int64_t rows, int64_t d) {
    if (d < W || d % W || d > DMAX) return -1;
    const int64_t nc = d / W;
    const vf inv_d = splat(1.0f / (float)d);
    for (int64_t s = 0; s < models; s++) {
        vf w[DMAX / W], gw[DMAX / W], gb[DMAX / W];
        for (int64_t c = 0; c < nc; c++) {
            w[c] = load(weight + s * d + c * W);
            gw[c] = gb[c] = splat(0.0f);
        }
        for (int64_t r = s * rows; r < (s + 1) * rows; r++) {
            vf gh[DMAX / W], xh[DMAX / W], sum = splat(0.0f), dot = splat(0.0f);
            for (int64_t c = 0; c < nc; c++) {
                vf gr = load(grad + r * d + c * W);
                xh[c] = load(xhat + r * d + c * W);
                gw[c] += gr * xh[c];
                gb[c] += gr;
                gh[c] = gr * w[c];
                sum += gh[c];
                dot += gh[c] * xh[c];
            }
            vf mean = splat(hsum(sum)) * inv_d, proj = splat(hsum(dot)) * inv_d;
            for (int64_t c = 0; c < nc; c++)
                store(grad_in + r * d + c * W, splat(rstd[r]) * (gh[c] - mean - xh[c] * proj));
        }
        for (int64_t c = 0; c < nc; c++) {
            store(grad_weight + s * d + c * W, gw[c]);
            store(grad_bias + s * d + c * W, gb[c]);
        }
    }
    return 0;
}
