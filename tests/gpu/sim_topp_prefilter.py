# Simulates the top-p-alone prefilter of kernels/sample.cu (each block keeps its first 64 in the
# order; the sampling block uses them only when they hold the whole top-p set, checked by the
# total weight and the earliest block cut) against sampling over the whole row, on random
# peaked, flat and tied logits: prints how many draws took each path and how many differ.
# Run: python3 tests/gpu/sim_topp_prefilter.py (numpy). The algorithm only; the kernel is
# checked by test_kernels on the GPU.
import numpy as np, math
rng=np.random.default_rng(1)
def weights(l,T):
    m=l.max(); return np.floor(np.exp((l-m)/T)*2**32+0.5).astype(np.float64)
def order_of(idx,l):  # ids sorted by (l desc, id asc)
    return sorted(idx,key=lambda i:(-l[i],i))
def draw_full(l,T,p,u):
    w=weights(l,T); cand=[i for i in range(len(l)) if w[i]>0]
    o=order_of(cand,l); cw=np.cumsum([w[i] for i in o]); W=cw[-1]
    t=min(max(math.ceil(p*W),1),W); c=int(np.searchsorted(cw,t))  # first >= t
    kw=cw[c]; r=min(int(u*kw),kw-1); return o[int(np.searchsorted(cw,r+1))]
def draw_pf(l,T,p,u,B,K):
    n=len(l); w=weights(l,T); surv=[]; thr=[]
    for b in range(B):
        s0=b*n//B; s1=(b+1)*n//B; o=order_of(range(s0,s1),l)
        if K< s1-s0: surv+=o[:K]; thr.append(o[K-1])
        else: surv+=o
    W=w.sum(); t=min(max(math.ceil(p*W),1),W)
    so=order_of([i for i in surv if w[i]>0],l); cw=np.cumsum([w[i] for i in so])
    if cw[-1]<t: return None
    c=int(np.searchsorted(cw,t)); ct=so[c]
    if thr:
        e=order_of(thr,l)[0]
        if (-l[ct],ct)>(-l[e],e): return None
    kw=cw[c]; r=min(int(u*kw),kw-1); return so[int(np.searchsorted(cw,r+1))]
stats={'fast':0,'fallback':0,'bad':0}
for trial in range(60):
    n=int(rng.integers(8192,40000)); dist=trial%3
    l=rng.normal(size=n)*(0.3 if dist==1 else 3.0)
    if dist==2: l=np.round(l*2)/2
    l=l.astype(np.float32).astype(np.float64)
    T=[0.7,1.0,1.3][trial%3]; p=[0.5,0.9,0.95][(trial//3)%3]
    B=min(132,n//256)
    for u in [0.0,0.3,0.77,0.999999]:
        a=draw_full(l,T,p,u); b=draw_pf(l,T,p,u,B,64)
        if b is None: stats['fallback']+=1
        elif a!=b: stats['bad']+=1
        else: stats['fast']+=1
print(stats)
