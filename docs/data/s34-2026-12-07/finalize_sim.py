# Simulates the patched antidiagonal_score finalize (per-tile) for one CTA and head chunk,
# with the kernel's index formulas, against a direct two-pass computation.
import numpy as np, math, sys
rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
def run(D, ps, first, groups, kend, cand, hc):
    IPW = 256 // D; WPH = 8 // IPW; HG = 16 // WPH
    TK = 128 if D <= 128 else 64; NKG = TK // 8
    NROW = HG * 16; PMAX = NKG + 1
    CPT = NROW * NKG // 512 if NROW * NKG >= 512 else 1; TPR = NKG // CPT
    NEG = -math.inf
    # partial sums red[hg][ip][rg][kg_global] for all keys; z = sum over ip * zs
    nkg_all = (kend + TK) // 8 + NKG
    red_all = rng.normal(size=(HG, WPH, 16, nkg_all)).astype(np.float32) * 3
    zs = 0.3
    # direct: per row (h, rg) visible kg < (first+8rg)/8 and 8kg < kend
    want = np.zeros(cand + 1)
    for h in range(hc):
        for rg in range(min(groups, 16)):
            vis = (first + 8 * rg) // 8
            kgs = [kg for kg in range(nkg_all) if kg < vis and 8 * kg < kend]
            if not kgs: continue
            z = np.array([red_all[h, :, rg, kg].astype(np.float64).sum() * zs for kg in kgs])
            m = z.max(); l = np.exp(z - m).sum()
            hi1 = min(kend, (cand + 1) * ps)
            for kg, zz in zip(kgs, z):
                if 8 * kg < hi1:
                    pg = (8 * kg) // ps
                    if 1 <= pg <= cand: want[pg] += math.exp(zz - m) / l
    # simulated kernel
    scores = np.zeros(cand + 1)
    T = 512
    fr = np.arange(T) // TPR; fc0 = (np.arange(T) % TPR) * CPT; my_rg = fr % 16
    row_ok = (fr < hc * 16) & (my_rg < groups)
    my_vis = (first + 8 * my_rg) // 8
    m_row = np.full(T, NEG); l_row = np.zeros(T)
    for pas in range(2):
        lo = 0 if pas == 0 else ps // TK * TK
        hi = kend if pas == 0 else min(kend, (cand + 1) * ps)
        if hi <= lo: continue
        n_tiles = (hi - lo + TK - 1) // TK
        for ti in range(n_tiles):
            k0 = lo + ti * TK
            red = red_all[:, :, :, k0 // 8: k0 // 8 + NKG]  # [hg][ip][rg][col]
            z = np.full((T, CPT), NEG); tmax = np.full(T, NEG)
            for t in range(T):
                for c in range(CPT):
                    col = fc0[t] + c; kg = k0 // 8 + col
                    if row_ok[t] and kg < my_vis[t] and 8 * kg < hi:
                        s = np.float32(0)
                        for w in range(WPH): s = np.float32(s + red[fr[t] // 16, w, my_rg[t], col])
                        z[t, c] = float(s) * zs
                    tmax[t] = max(tmax[t], z[t, c])
            def xor_reduce(v, op):
                v = v.copy(); o = TPR // 2
                while o > 0:
                    v = op(v, v[np.arange(T) ^ o]); o //= 2
                return v
            tmax = xor_reduce(tmax, np.maximum)
            if pas == 0:
                mn = np.maximum(m_row, tmax)
                with np.errstate(invalid='ignore'):
                    s = np.where(z > NEG, np.exp(z - mn[:, None]), 0).sum(1)
                s = xor_reduce(s, np.add)
                upd = tmax > NEG
                with np.errstate(invalid='ignore'):
                    l_row = np.where(upd, l_row * np.exp(np.where(upd, m_row - mn, 0)) + s, l_row)
                m_row = np.where(upd, mn, m_row)
                continue
            pz = np.zeros((NROW, NKG))
            for t in range(T):
                if fr[t] < NROW:
                    inv = 1 / l_row[t] if l_row[t] > 0 else 0
                    for c in range(CPT):
                        pz[fr[t], fc0[t] + c] = math.exp(z[t, c] - m_row[t]) * inv if z[t, c] > NEG else 0
            csum = pz.sum(0)
            pa = k0 // ps; pb = (k0 + TK - 1) // ps
            for x in range(pb - pa + 1):
                pg = pa + x
                if pg < 1 or pg > cand: continue
                c0 = (pg * ps - k0) // 8 if pg * ps > k0 else 0
                c1 = min(NKG, ((pg + 1) * ps - k0) // 8)
                scores[pg] += csum[c0:c1].sum()
    err = np.abs(scores[1:] - want[1:]).max()
    ok = err < 1e-4 * max(1, np.abs(want).max())
    print(f"D{D} ps{ps} first{first} groups{groups} kend{kend} cand{cand} hc{hc}: err {err:.2e} {'ok' if ok else 'FAIL'}  sum {want.sum():.3f}")
    return ok
allok = True
for D in (64, 128, 256):
    for ps in (8, 16, 64, 128, 192):
        first = int(rng.integers(ps * 2, 700)); groups = int(rng.integers(1, 17))
        kend = 8 * ((first + 8 * (groups - 1)) // 8)
        cand = max(1, kend // ps - 1 + int(rng.integers(0, 2)))
        IPW = 256 // D; HG = 16 // (8 // IPW)
        hc = int(rng.integers(1, HG + 1))
        allok &= run(D, ps, first, groups, kend, cand, hc)
print("ALL OK" if allok else "SOME FAIL")
