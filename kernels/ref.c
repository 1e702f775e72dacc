/* See ref.h. The dot product keeps 8 partial sums so the compiler can use SIMD lanes without
 * -ffast-math; the order of the partial sums is fixed, so results are deterministic. */
#include "config.h"
#include "ref.h"
#include "runtime/model_config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float dot(const float *a, const float *b, int n)
{
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
    float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

void ref_embed(float *out, const float *table, const int *ids, int T, int dim)
{
    for (int t = 0; t < T; t++)
        memcpy(out + (size_t)t * dim, table + (size_t)ids[t] * dim, (size_t)dim * sizeof(float));
}

void ref_rmsnorm(float *out, const float *x, const float *w, int rows, int dim, float eps)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * dim;
        float *o = out + (size_t)r * dim;
        float ss = dot(xr, xr, dim);
        float scale = 1.0f / sqrtf(ss / (float)dim + eps);
        for (int i = 0; i < dim; i++) o[i] = (xr[i] * scale) * w[i];
    }
}

void ref_matmul(float *out, const float *in, const float *W, const float *bias, int T, int k, int n)
{
#pragma omp parallel for schedule(static)
    for (int j = 0; j < n; j++) {
        const float *wr = W + (size_t)j * k;
        for (int t = 0; t < T; t++) {
            float v = dot(in + (size_t)t * k, wr, k);
            out[(size_t)t * n + j] = bias ? v + bias[j] : v;
        }
    }
}

void ref_rope(float *x, const int *pos, int T, int heads, int hd, const float *inv_freq,
              int interleaved)
{
    int half = hd / 2;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < heads; h++) {
            float *v = x + ((size_t)t * heads + h) * hd;
            for (int i = 0; i < half; i++) {
                float a = (float)pos[t] * inv_freq[i];
                float c = cosf(a), s = sinf(a);
                int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
                float x0 = v[i0], x1 = v[i1];
                v[i0] = x0 * c - x1 * s;
                v[i1] = x1 * c + x0 * s;
            }
        }
}

void ref_attention(float *out, const float *q, int q_stride, const float *kc, const float *vc,
                   int pos0, int T, int hq, int hkv, int hd, const int *kv_of)
{
    const float scale = 1.0f / sqrtf((float)hd);
    const int ctx = pos0 + T;
#pragma omp parallel
    {
        float *att = malloc((size_t)ctx * sizeof(float));
#pragma omp for collapse(2) schedule(static)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < hq; h++) {
                const float *qv = q + (size_t)t * q_stride + (size_t)h * hd;
                int kvh = kv_of[h], n = pos0 + t + 1;
                float mx = -INFINITY;
                for (int p = 0; p < n; p++) {
                    att[p] = dot(qv, kc + ((size_t)p * hkv + kvh) * hd, hd) * scale;
                    if (att[p] > mx) mx = att[p];
                }
                float sum = 0;
                for (int p = 0; p < n; p++) {
                    att[p] = expf(att[p] - mx);
                    sum += att[p];
                }
                float *o = out + ((size_t)t * hq + h) * hd;
                for (int i = 0; i < hd; i++) o[i] = 0;
                for (int p = 0; p < n; p++) {
                    const float *vv = vc + ((size_t)p * hkv + kvh) * hd;
                    float a = att[p] / sum;
                    for (int i = 0; i < hd; i++) o[i] += a * vv[i];
                }
            }
        free(att);
    }
}

void ref_swiglu(float *out, const float *gate, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void ref_add(float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

void ref_penalize(float *out, const float *logits, const float *bias, int vocab, int *count,
                  int *hist, const int *ids, const int *pos, int last_n, float rep, float pres,
                  float freq)
{
    const int p = pos[0], in = ids[0], old = last_n > 0 && p >= last_n ? hist[p - last_n] : -1;
    hist[p] = in;
    if (in >= 0 && in < vocab) count[in]++;
    if (old >= 0 && old < vocab) count[old]--;
    for (int v = 0; v < vocab; v++) {
        const float l = bias ? logits[v] + bias[v] : logits[v];
        out[v] = count[v] > 0 ? ls_penalised(l, count[v], rep, pres, freq) : l;
    }
}

void ref_argmax_pairs(float *pairs, const float *x, int n, int first, int slot, int tp)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (x[i] == x[i] && (best < 0 || x[i] > x[best])) best = i;
    for (int i = 0; i < 2 * tp; i++) pairs[i] = 0.0f;
    pairs[2 * slot] = best < 0 ? 0.0f : x[best];
    pairs[2 * slot + 1] = best < 0 ? -1.0f : (float)(first + best);
}

int ref_argmax_pick(const float *pairs, int tp)
{
    int best = -1;
    float bv = 0.0f;
    for (int r = 0; r < tp; r++) {
        const float v = pairs[2 * r];
        const int i = (int)pairs[2 * r + 1];
        if (i >= 0 && (best < 0 || v > bv || (v == bv && i < best))) bv = v, best = i;
    }
    return best < 0 ? 0 : best;
}

void ref_row_logprobs(double *out, const float *logits, int rows, int n, size_t ld,
                      const int *targets, int first, int N)
{
    const int W = LS_SCORE_W(N), K = N < n ? N : n;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *l = logits + (size_t)r * ld;
        double *o = out + (size_t)r * W, mx = -INFINITY, sum = 0.0;
        for (int i = 0; i < n; i++)
            if (l[i] > mx) mx = l[i];
        for (int i = 0; i < n; i++) sum += exp((double)l[i] - mx);
        const int t = targets ? targets[r] - first : -1;
        o[0] = mx;
        o[1] = sum;
        o[2] = t >= 0 && t < n ? (double)l[t] : -INFINITY;
        /* the K largest by a sorted insertion in column order (ties: the lower id first) */
        int top[LS_SCORE_TOP_MAX], kept = 0;
        for (int v = 0; v < n && K > 0; v++) {
            if (kept == K && !(l[v] > l[top[K - 1]])) continue;
            int k = kept < K ? kept++ : K - 1;
            while (k > 0 && l[v] > l[top[k - 1]]) {
                top[k] = top[k - 1];
                k--;
            }
            top[k] = v;
        }
        for (int k = 0; k < N; k++) {
            o[3 + k] = k < kept ? (double)l[top[k]] : -INFINITY;
            o[3 + N + k] = k < kept ? (double)(first + top[k]) : -1.0;
        }
    }
}

void ref_rope_inv_freq(float *inv_freq, int hd, float theta, int scaling, float factor,
                       float low_freq_factor, float high_freq_factor, int orig_max_pos)
{
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        /* HF: 1 / theta ** (arange(0, hd, 2) / hd), in float32 */
        float f = 1.0f / powf(theta, (float)(2 * i) / (float)hd);
        if (scaling == LS_ROPE_SCALING_LINEAR) {
            f /= factor;
        } else if (scaling == LS_ROPE_SCALING_LLAMA3) {
            float low_wavelen = (float)orig_max_pos / low_freq_factor;
            float high_wavelen = (float)orig_max_pos / high_freq_factor;
            float wavelen = 2.0f * (float)M_PI / f;
            if (wavelen > low_wavelen) {
                f = f / factor;
            } else if (wavelen >= high_wavelen) {
                float smooth = ((float)orig_max_pos / wavelen - low_freq_factor) /
                               (high_freq_factor - low_freq_factor);
                f = (1.0f - smooth) * f / factor + smooth * f;
            }
        }
        inv_freq[i] = f;
    }
}
