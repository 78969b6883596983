"""A hidden test's process: it may compute and reply, and leave nothing behind that a later cell could read.

The runner forks a child for each hidden test cell; the child reads the cell's inputs itself (its parent never
holds them), runs the answer, replies and exits. :func:`confine` makes that child unable to leave anything for
the notebook's later cells: before the inputs arrive it

* closes the files it inherited (so neither their contents nor their shared offsets can carry data),
* turns memory it shares with its parent (``mmap``, torch's ``share_memory_()``, System V segments) into
  private copies,
* makes itself undumpable (no other process of the sandbox can read its memory), and
* installs a seccomp filter: no new process (threads are fine), no program, no file opened for writing,
  created, renamed, removed or changed, no write but to the grader's reply pipe, no shared memory, socket,
  message queue or semaphore, no signal to another process, no renaming itself (its name shows in ``/proc``).

seccomp's numbers are the kernel's, per architecture: x86-64 and AArch64 here. Elsewhere :func:`confine`
returns False and the child runs unconfined (the README says so).
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

# struct sock_filter codes
_LD_ABS, _JEQ, _JSET, _RET = 0x20, 0x15, 0x45, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38
O_WRITES = 0x1 | 0x2 | 0x40 | 0x200 | 0x400 | 0x400000  # O_WRONLY O_RDWR O_CREAT O_TRUNC O_APPEND __O_TMPFILE
MAP_SHARED = 0x01
CLONE_THREAD = 0x10000
PR_SET_DUMPABLE, PR_SET_NAME, PR_SET_MM, PR_SET_PTRACER = 4, 15, 35, 0x59616D61

ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# name -> (x86-64, AArch64); None where the architecture has no such call (AArch64 has only the *at forms).
SYSCALLS = {
    "write": (1, 64), "pwrite64": (18, 68), "writev": (20, 66), "pwritev": (296, 70), "pwritev2": (328, 287),
    "open": (2, None), "openat": (257, 56), "openat2": (437, 437), "creat": (85, None), "unlink": (87, None),
    "unlinkat": (263, 35), "rename": (82, None), "renameat": (264, 38), "renameat2": (316, 276),
    "mkdir": (83, None), "mkdirat": (258, 34), "rmdir": (84, None), "link": (86, None), "linkat": (265, 37),
    "symlink": (88, None), "symlinkat": (266, 36), "truncate": (76, 45), "ftruncate": (77, 46),
    "fallocate": (285, 47), "chmod": (90, None), "fchmod": (91, 52), "fchmodat": (268, 53), "chown": (92, None),
    "fchown": (93, 55), "lchown": (94, None), "fchownat": (260, 54), "utime": (132, None), "utimes": (235, None),
    "utimensat": (280, 88), "futimesat": (261, None), "setxattr": (188, 5), "lsetxattr": (189, 6),
    "fsetxattr": (190, 7), "removexattr": (197, 14), "lremovexattr": (198, 15), "fremovexattr": (199, 16),
    "mknod": (133, None), "mknodat": (259, 33), "sendfile": (40, 71), "copy_file_range": (326, 285),
    "splice": (275, 76), "tee": (276, 77), "vmsplice": (278, 75), "sendto": (44, 206), "sendmsg": (46, 211),
    "sendmmsg": (307, 269), "socket": (41, 198), "socketpair": (53, 199), "connect": (42, 203), "bind": (49, 200),
    "listen": (50, 201), "accept": (43, 202), "accept4": (288, 242), "shmget": (29, 194), "shmat": (30, 196),
    "shmctl": (31, 195), "msgget": (68, 186), "msgsnd": (69, 189), "msgctl": (71, 187), "semget": (64, 190),
    "semop": (65, 193), "semtimedop": (220, 192), "semctl": (66, 191), "mq_open": (240, 180),
    "mq_timedsend": (242, 182), "mq_unlink": (241, 181), "mq_notify": (244, 184), "memfd_create": (319, 279),
    "ptrace": (101, 117), "process_vm_writev": (311, 271), "process_vm_readv": (310, 270), "kill": (62, 129),
    "tkill": (200, 130), "tgkill": (234, 131), "rt_sigqueueinfo": (129, 138), "rt_tgsigqueueinfo": (297, 240),
    "pidfd_open": (434, 434), "pidfd_getfd": (438, 438), "pidfd_send_signal": (424, 424),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427), "bpf": (321, 280),
    "perf_event_open": (298, 241), "userfaultfd": (323, 282), "keyctl": (250, 219), "add_key": (248, 217),
    "request_key": (249, 218), "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41),
    "chroot": (161, 51), "unshare": (272, 97), "setns": (308, 268), "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265), "fork": (57, None), "vfork": (58, None), "clone": (56, 220),
    "clone3": (435, 435), "execve": (59, 221), "execveat": (322, 281), "mmap": (9, 222), "prctl": (157, 167),
    "prlimit64": (302, 261),
}
DENIED = ["creat", "unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir", "link",
          "linkat", "symlink", "symlinkat", "truncate", "ftruncate", "fallocate", "chmod", "fchmod", "fchmodat",
          "chown", "fchown", "lchown", "fchownat", "utime", "utimes", "utimensat", "futimesat", "setxattr",
          "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr", "mknod", "mknodat", "sendfile",
          "copy_file_range", "splice", "tee", "vmsplice", "sendto", "sendmsg", "sendmmsg", "socket", "socketpair",
          "connect", "bind", "listen", "accept", "accept4", "shmget", "shmat", "shmctl", "msgget", "msgsnd",
          "msgctl", "semget", "semop", "semtimedop", "semctl", "mq_open", "mq_timedsend", "mq_unlink",
          "mq_notify", "memfd_create", "ptrace", "process_vm_writev", "process_vm_readv", "kill", "tkill",
          "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open", "pidfd_getfd", "pidfd_send_signal",
          "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "perf_event_open", "userfaultfd",
          "keyctl", "add_key", "request_key", "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
          "name_to_handle_at", "open_by_handle_at", "fork", "vfork", "execve", "execveat"]


def _arg(i: int) -> int:
    return 16 + 8 * i  # struct seccomp_data: nr, arch, instruction_pointer, args[6] (the low 32 bits first)


def _program(arch: str, reply_fd: int, pid: int) -> list[tuple[int, int, int, int]]:
    """The filter, as (code, jt, jf, k): every rule is local, so no jump is longer than a few instructions."""
    column = 0 if arch == "x86_64" else 1

    def nr(name: str) -> int | None:
        return SYSCALLS[name][column]

    deny, allow, enosys = (_RET, 0, 0, _ERRNO | EPERM), (_RET, 0, 0, _ALLOW), (_RET, 0, 0, _ERRNO | ENOSYS)
    prog = [(_LD_ABS, 0, 0, 4), (_JEQ, 1, 0, ARCH[arch]), deny, (_LD_ABS, 0, 0, 0)]
    if arch == "x86_64":
        prog += [(0x35, 0, 1, 0x40000000), deny]  # JGE: the x32 ABI's numbers
    for name in DENIED:
        if nr(name) is not None:
            prog += [(_JEQ, 0, 1, nr(name)), deny]
    for name in ("clone3", "openat2"):  # glibc falls back to clone and openat
        prog += [(_JEQ, 0, 1, nr(name)), enosys]

    def block(name: str, body: list) -> None:
        if nr(name) is not None:
            prog.extend([(_JEQ, 0, len(body), nr(name)), *body])

    for name in ("write", "pwrite64", "writev", "pwritev", "pwritev2"):  # only the reply
        block(name, [(_LD_ABS, 0, 0, _arg(0)), (_JEQ, 0, 1, reply_fd), allow, deny])
    block("open", [(_LD_ABS, 0, 0, _arg(1)), (_JSET, 0, 1, O_WRITES), deny, allow])
    block("openat", [(_LD_ABS, 0, 0, _arg(2)), (_JSET, 0, 1, O_WRITES), deny, allow])
    block("mmap", [(_LD_ABS, 0, 0, _arg(3)), (_JSET, 0, 1, MAP_SHARED), deny, allow])
    block("clone", [(_LD_ABS, 0, 0, _arg(0)), (_JSET, 0, 1, CLONE_THREAD), allow, deny])  # threads only
    block("tgkill", [(_LD_ABS, 0, 0, _arg(0)), (_JEQ, 0, 1, pid), allow, deny])  # signals to itself only
    block("prlimit64", [(_LD_ABS, 0, 0, _arg(0)), (_JEQ, 1, 0, 0), (_JEQ, 0, 1, pid), allow, deny])
    refused = (PR_SET_DUMPABLE, PR_SET_NAME, PR_SET_MM, PR_SET_PTRACER)
    block("prctl", [(_LD_ABS, 0, 0, _arg(0)),
                    *[(_JEQ, len(refused) - i, 0, op) for i, op in enumerate(refused)], allow, deny])
    return prog + [allow]


def supported() -> bool:
    return platform.system() == "Linux" and platform.machine() in ARCH


def _privatize_shared_memory(libc) -> None:
    """Replace every shared mapping by a private copy: what the child writes there stays in the child."""
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    with open("/proc/self/maps") as f:
        maps = f.read().splitlines()
    for line in maps:
        parts = line.split()
        if len(parts) < 5 or parts[1][3] != "s":
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        perms, size = parts[1], end - start
        prot = (1 if "r" in perms else 0) | (2 if "w" in perms else 0) | (4 if "x" in perms else 0)
        content = ctypes.string_at(start, size) if "r" in perms else b""
        # MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, read-write to copy the content back
        if libc.mmap(start, size, 3, 0x02 | 0x20 | 0x10, -1, 0) != start:
            raise OSError(ctypes.get_errno(), "could not make a shared mapping private")
        if content:
            ctypes.memmove(start, content, len(content))
        libc.mprotect(start, size, prot)


def _close_inherited(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, closed already


def confine(reply_fd: int, keep_fds: set[int]) -> bool:
    """Confine this (child) process as the module says; False where seccomp is not available here."""
    if not supported():
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    _close_inherited({0, 1, 2, reply_fd, *keep_fds})
    _privatize_shared_memory(libc)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: what lets an unprivileged process add a filter
        return False
    prog = _program(platform.machine(), reply_fd, os.getpid())
    filters = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(filters)

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Fprog(len(prog), ctypes.addressof(buf))
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    return libc.prctl(22, 2, ctypes.addressof(fprog), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
