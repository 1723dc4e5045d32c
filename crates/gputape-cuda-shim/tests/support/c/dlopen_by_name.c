/* An unmodified CUDA program in miniature, as PyTorch's runtime is: it loads the driver by name
 * and calls one entry point. Exits with the status its first argument gives. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*GetVersion)(int *);

int main(int argc, char **argv) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 90;
    }
    GetVersion f = (GetVersion)dlsym(h, "cuDriverGetVersion");
    if (!f) return 91;
    int v = 0;
    int r = f(&v);
    printf("cuDriverGetVersion -> %d, version %d\n", r, v);
    return argc > 1 ? atoi(argv[1]) : 0;
}
