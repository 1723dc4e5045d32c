"""Writes the positions fixture for gputape's location-table decoder (src/shimtrace/lines.rs):
line tables of real code objects, with each instruction's (line, column) as CPython gives it.

    for v in 3.11 3.12 3.13; do python$v scripts/python-positions.py; done > positions.jsonl
    python3 -c 'import json,sys; print(json.dumps([json.loads(l) for l in open("positions.jsonl")]))' \
        > tests/fixtures/python/positions.json
"""
import json
import sys

SOURCE = '''
import math

def plain(x, y):
    z = x + y
    return math.sqrt(z) * 2

def far_columns(a):
    return                                                                                                                                         a + 1

def many_lines(a,
               b,
               c):
    total = (a
             + b
             + c)
    for i in range(3):
        total += i
    # a long jump in lines follows
''' + "\n" * 300 + '''
    return total

def gen(n):
    for i in range(n):
        yield i * i

async def coro(x):
    return await x

square = lambda v: v * v

class Model:
    def forward(self, h):
        out = [q * 2 for q in h if q > 0]
        return sum(out), {k: k for k in out}

def nested():
    def inner(q):
        return q + 1
    return inner
'''


def walk(code):
    yield code
    for c in code.co_consts:
        if hasattr(c, "co_code"):
            yield from walk(c)


def main():
    top = compile(SOURCE, "fixture.py", "exec")
    for code in walk(top):
        pos = list(code.co_positions())
        assert len(pos) == len(code.co_code) // 2, (len(pos), len(code.co_code))
        print(json.dumps({
            "py_minor": sys.version_info.minor,
            "name": code.co_qualname,
            "first_line": code.co_firstlineno,
            "linetable": code.co_linetable.hex(),
            "positions": [[p[0], p[2]] for p in pos],
        }))


main()
