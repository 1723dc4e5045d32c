/* What the driver shim's recording adds to a launch, inside one process: ROUNDS rounds of N
 * launches (a PARAM_BYTES parameter buffer passed through `extra`, as cuBLAS and PyTorch's
 * large-struct kernels pass theirs) and a stream sync, alternating between gputape's recording
 * paused (gputape_shim_pause, even rounds) and running; the first two rounds are warm-up.
 * Prints the median ns per launch of each, and the page faults this thread took per launch
 * (fresh memory the recorder fills shows there). Run under `gputape run --flight DIR` or
 * `-o TRACE` against the fake driver: scripts/shim-cost.sh.
 * PARAM_BYTES 0: the fake driver's `scale` kernel instead, its three parameters (8, 4 and 4
 * bytes) passed through `kernelParams`, as most of PyTorch's own kernels take theirs.
 * THRASH_KB: before each launch, read and write that many KiB of memory of its own, one word
 * a cache line, and run 48 KiB of code of its own (more than a level-1 instruction cache), as
 * an engine's own work between launches (PyTorch spends tens of microseconds in Python and its
 * dispatcher) leaves the recorder's code and data out of the nearest caches; the paused rounds
 * do the same, so the difference is still the recording's. Under cachegrind the recorder's
 * misses per launch then count the lines of code and data a record touches.
 * Usage: launch_cost [ROUNDS [N [PARAM_BYTES [THRASH_KB]]]] (40, 5000, 448, 0). Linked with
 * -lcuda. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
typedef unsigned long long CUdeviceptr;
int cuInit(unsigned flags);
int cuStreamCreate(void **stream, unsigned flags);
int cuStreamSynchronize(void *stream);
int cuMemAlloc_v2(CUdeviceptr *p, size_t bytes);
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shmem, void *stream, void **params, void **extra);
extern void gputape_shim_pause(int paused) __attribute__((weak));
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
/* 48 KiB of straight-line code, for THRASH_KB. */
static void __attribute__((noinline)) code_sled(void){ __asm__ volatile(".rept 49152\n\tnop\n\t.endr"); }
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  int rounds=argc>1?atoi(argv[1]):40, n=argc>2?atoi(argv[2]):5000, psz=argc>3?atoi(argv[3]):448;
  int thrash=argc>4?atoi(argv[4]):0;
  if(rounds<4||rounds>1000||n<1||psz<0||psz>4096||thrash<0||thrash>1<<20){fprintf(stderr,"launch_cost: bad arguments\n");return 2;}
  size_t lines=(size_t)thrash*1024/64; volatile unsigned long *junk=lines?calloc(lines,64):0;
  void*s; cuInit(0); cuStreamCreate(&s,1);
  unsigned char buf[4096]; memset(buf,7,sizeof buf); size_t size=psz;
  void*extra[]={(void*)1,buf,(void*)2,&size,(void*)0};
  /* scale(float *x, int n, float k) with n 0: the fake driver touches nothing. */
  CUdeviceptr x=0; int cnt=0; float scale_k=2.0f; void*kp[]={&x,&cnt,&scale_k};
  void*f=psz?(void*)0x7000:(void*)0x5ca1eull, **params=psz?0:kp, **ex=psz?extra:0;
  if(!psz&&cuMemAlloc_v2(&x,64)){fprintf(stderr,"launch_cost: cuMemAlloc failed\n");return 1;}
  double t[2][1000]; int k[2]={0,0}; long flt[2]={0,0};
  for(int r=0;r<rounds;r++){
    int paused=r%2==0; if(gputape_shim_pause) gputape_shim_pause(paused);
    struct rusage a,b; getrusage(RUSAGE_THREAD,&a);
    double t0=now();
    for(int i=0;i<n;i++){
      if(lines){ for(size_t l=0;l<lines;l++) junk[l*8]+=1; code_sled(); }
      buf[0]=i; cuLaunchKernel(f,1,1,1,32,1,1,0,s,params,ex);
    }
    cuStreamSynchronize(s);
    double dt=(now()-t0)/n; getrusage(RUSAGE_THREAD,&b);
    if(r>=2){ t[paused][k[paused]++]=dt; flt[paused]+=b.ru_minflt-a.ru_minflt; }
  }
  for(int p=0;p<2;p++) qsort(t[p],k[p],sizeof(double),cmp);
  printf("paused %.1f ns/launch, recording %.1f ns/launch, +%.1f ns; minflt per launch paused %.4f recording %.4f\n",
    t[1][k[1]/2], t[0][k[0]/2], t[0][k[0]/2]-t[1][k[1]/2], (double)flt[1]/(k[1]*(double)n), (double)flt[0]/(k[0]*(double)n));
  return 0;
}
