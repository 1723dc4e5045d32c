/* A program linked against libcuda (-lcuda): the loader binds its calls at start. */
#include <stdio.h>

int cuInit(unsigned int flags);
int cuDriverGetVersion(int *version);

int main(void) {
    int v = 0;
    int a = cuInit(0);
    int b = cuDriverGetVersion(&v);
    printf("linked: cuInit -> %d, cuDriverGetVersion -> %d, version %d\n", a, b, v);
    return 0;
}
