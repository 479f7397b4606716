// sample: out[r] = a token drawn from row r of the logits x [rows][n] f32 with row r's settings
// (settings[4r..4r+4]: temperature f32 bits, top_k, top_p f32 bits, u f32 bits), the algorithm of
// crate::sampling::sample_row and the same structure as shaders/sample.wgsl (read that header):
// order-preserving u32 keys of the logits, bitwise searches for the top-k key (block counts) and
// the top-p key (block mass sums), tie cuts and the inverse-CDF draw by scans in id order over
// per-thread id segments. One block of 512 threads per row; nothing but the logits is read.
//
// Precision: weights are f32 (expf of (l - max) / T), every mass is accumulated in f64 (cheap
// here, and it puts the CUDA result closer to the host's f64 reference than WGSL's f32 sums).
// Sums of non-negative terms in a fixed order are monotone in the set summed, so the bitwise
// search is exact with respect to its own sums.

#define SAMPLE_KEY_NEG_INF 0x007fffffu
#define SAMPLE_KEY_POS_INF 0xff800000u

// Larger logit, larger key; NaN is 0 (below -inf), -0 and +0 share one key.
__device__ __forceinline__ u32 sample_key(float l) {
    u32 b = __float_as_uint(l), a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return 0u;
    if (a == 0u) return 0x80000000u;
    return b != a ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float sample_logit(u32 k) {
    return (k & 0x80000000u) ? __uint_as_float(k & 0x7fffffffu) : __uint_as_float(~k);
}

struct SampleRow {
    const float* x;
    u32 n, kmax;
    float mx, temp;
    __device__ float weight(u32 key, float l) const {
        if (key == kmax) return 1.0f;
        if (key <= SAMPLE_KEY_NEG_INF || kmax == SAMPLE_KEY_POS_INF) return 0.0f;
        float z = (l - mx) / temp;
        return z >= -87.0f ? expf(z) : 0.0f;
    }
    // Kept by the cut (tau, cut): key > tau || (key == tau && id <= cut).
    __device__ static bool within(u32 k, u32 i, u32 tau, u32 cut) { return k > tau || (k == tau && i <= cut); }
};

template <typename T> __device__ __forceinline__ T sample_warp_sum(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <typename T> __device__ __forceinline__ T sample_warp_max(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        T y = __shfl_xor_sync(0xffffffffu, v, o);
        v = y > v ? y : v;
    }
    return v;
}
template <typename T> __device__ __forceinline__ T sample_warp_incl(T v) {
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        T y = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += y;
    }
    return v;
}

// Block-wide sum / max (every thread gets the result); `red` holds one slot per warp.
template <typename T> __device__ T sample_block_sum(T v, T* red) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = sample_warp_sum(v);
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    return sample_warp_sum(lane < nw ? red[lane] : T(0));
}
template <typename T> __device__ T sample_block_max(T v, T* red) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = sample_warp_max(v);
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    return sample_warp_max(lane < nw ? red[lane] : T(0));
}
// Inclusive prefix sum over the block in thread order; *total gets the block's sum.
template <typename T> __device__ T sample_block_incl(T v, T* red, T* total) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = sample_warp_incl(v);
    __syncthreads();
    if (lane == 31) red[w] = v;
    __syncthreads();
    if (w == 0) {
        T s = lane < nw ? red[lane] : T(0);
        red[lane] = sample_warp_incl(s);
    }
    __syncthreads();
    if (w > 0) v += red[w - 1];
    *total = red[nw - 1];
    return v;
}

__device__ u32 sample_count_ge(const SampleRow& w, u32 c, u32* red) {
    u32 m = 0;
    for (u32 i = threadIdx.x; i < w.n; i += blockDim.x) m += sample_key(w.x[i]) >= c;
    return sample_block_sum(m, red);
}
// Weight of the tokens with key >= c among those kept by top-k (tk, ck).
__device__ double sample_mass_ge(const SampleRow& w, u32 c, u32 tk, u32 ck, double* red) {
    double m = 0.0;
    for (u32 i = threadIdx.x; i < w.n; i += blockDim.x) {
        float l = w.x[i];
        u32 k = sample_key(l);
        if (k >= c && SampleRow::within(k, i, tk, ck)) m += (double)w.weight(k, l);
    }
    return sample_block_sum(m, red);
}
__device__ u32 sample_count_ties(const SampleRow& w, u32 tau, u32 lim, u32* red) {
    u32 m = 0;
    for (u32 i = threadIdx.x; i < w.n; i += blockDim.x) m += sample_key(w.x[i]) == tau && i <= lim;
    return sample_block_sum(m, red);
}
// The id of the j-th (from 1, in id order) token with key == tau and id <= lim; NONE if fewer.
__device__ u32 sample_nth_tie(const SampleRow& w, u32 tau, u32 lim, u32 j, u32* red, u32* bcast) {
    u32 seg = (w.n + blockDim.x - 1) / blockDim.x;
    u32 lo = min(threadIdx.x * seg, w.n), hi = min(lo + seg, w.n);
    u32 c = 0;
    for (u32 i = lo; i < hi; i++) c += sample_key(w.x[i]) == tau && i <= lim;
    if (threadIdx.x == 0) *bcast = NONE_U32;
    u32 total;
    u32 before = sample_block_incl(c, red, &total) - c;
    if (before < j && j <= before + c) {
        u32 left = j - before;
        for (u32 i = lo; i < hi; i++) {
            if (sample_key(w.x[i]) == tau && i <= lim && --left == 0) {
                *bcast = i;
                break;
            }
        }
    }
    __syncthreads();
    u32 v = *bcast;
    __syncthreads();
    return v;
}

// Long (about 105 lines) on purpose: the kernel's phases (keys and row maximum, the top-k key
// search, the top-p key search, tie cuts, the draw) share its registers and shared memory; split
// into device functions they would pass all of that state around, and the body reads in the order
// it runs.
extern "C" __global__ void sample(SampleParams p, const float* x, const u32* settings, u32* out) {
    __shared__ u32 red_u[32];
    __shared__ double red_d[32];
    __shared__ unsigned long long red_l[32];
    __shared__ u32 bcast;
    const u32 r = blockIdx.x, t = threadIdx.x, n = p.n;
    const float* row = x + (u64)r * n;

    // Argmax by key (lowest id on ties, packed as key << 32 | ~id) and the count of numbers.
    unsigned long long best = 0;
    u32 nv = 0;
    for (u32 i = t; i < n; i += blockDim.x) {
        u32 k = sample_key(row[i]);
        unsigned long long c = ((unsigned long long)k << 32) | (u32)~i;
        if (k != 0 && c > best) best = c;
        nv += k != 0;
    }
    best = sample_block_max(best, red_l);
    nv = sample_block_sum(nv, red_u);
    const u32 kmax = (u32)(best >> 32), arg = ~(u32)best;
    const u32 tb = settings[4 * r], kk = settings[4 * r + 1], pb = settings[4 * r + 2];
    const float u = __uint_as_float(settings[4 * r + 3]);
    if (kmax <= SAMPLE_KEY_NEG_INF) {
        if (t == 0) out[r] = NONE_U32;
        return;
    }
    if ((tb & 0x80000000u) || tb == 0 || tb > 0x7f800000u) { // greedy unless T > 0
        if (t == 0) out[r] = arg;
        return;
    }
    SampleRow w{row, n, kmax, sample_logit(kmax), __uint_as_float(tb)};

    // Top-k: keep key > tk || (key == tk && id <= ck); (0, 0) keeps every number.
    u32 tk = 0, ck = 0;
    if (kk > 0 && kk < nv) {
        u32 tau = 0;
        for (int b = 31; b >= 0; b--) {
            u32 c = tau | (1u << b);
            if (sample_count_ge(w, c, red_u) >= kk) tau = c;
        }
        u32 gt = sample_count_ge(w, tau + 1, red_u);
        tk = tau;
        ck = sample_nth_tie(w, tau, NONE_U32, kk - gt, red_u, &bcast);
    }

    // Top-p within the top-k set: the final cut (tp, cp).
    u32 tp = tk, cp = ck;
    const float pp = __uint_as_float(pb);
    if ((pb & 0x7fffffffu) <= 0x7f800000u && pp < 1.0f) {
        double total = sample_mass_ge(w, 1, tk, ck, red_d);
        double target = total * ((double)pp - 1e-6);
        u32 tau = kmax, j = 1;
        if (target > 0.0) {
            tau = 0;
            for (int b = 31; b >= 0; b--) {
                u32 c = tau | (1u << b);
                if (sample_mass_ge(w, c, tk, ck, red_d) >= target) tau = c;
            }
            double gt = sample_mass_ge(w, tau + 1, tk, ck, red_d);
            u32 cnt = sample_count_ties(w, tau, tau == tk ? ck : NONE_U32, red_u);
            double wt = (double)w.weight(tau, sample_logit(tau));
            double q = (target - gt) / wt;
            j = cnt;
            if (wt > 0.0 && q < (double)cnt) j = q > 1.0 ? (u32)ceil(q) : 1u;
        }
        cp = sample_nth_tie(w, tau, tau == tk ? ck : NONE_U32, max(j, 1u), red_u, &bcast);
        tp = tau;
    }

    // Inverse CDF in id order over the kept set, r = u * kept mass.
    u32 seg = (n + blockDim.x - 1) / blockDim.x;
    u32 lo = min(t * seg, n), hi = min(lo + seg, n);
    double ms = 0.0;
    for (u32 i = lo; i < hi; i++) {
        float l = row[i];
        u32 k = sample_key(l);
        if (SampleRow::within(k, i, tp, cp)) ms += (double)w.weight(k, l);
    }
    double kept_mass;
    double incl = sample_block_incl(ms, red_d, &kept_mass);
    double rr = (double)u * kept_mass;
    u32 owner = sample_block_sum((u32)(incl <= rr), red_u);
    u32 last_seg = sample_block_max(ms > 0.0 ? t + 1 : 0u, red_u);
    if (owner >= blockDim.x) owner = max(last_seg, 1u) - 1;
    if (t == owner) {
        double acc = incl - ms;
        u32 pick = NONE_U32, last = NONE_U32;
        for (u32 i = lo; i < hi; i++) {
            float l = row[i];
            u32 k = sample_key(l);
            if (!SampleRow::within(k, i, tp, cp)) continue;
            float wi = w.weight(k, l);
            if (wi > 0.0f) {
                last = i;
                acc += wi;
                if (rr < acc) {
                    pick = i;
                    break;
                }
            }
        }
        if (pick == NONE_U32) pick = last;
        if (pick == NONE_U32) pick = arg;
        out[r] = pick;
    }
}
