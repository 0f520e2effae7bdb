# FIFOs, sockets and device nodes left in a session's /work: a FIFO that a
# supervisor opens blocks it forever (list_files, read_file, the save), a
# device node would read host devices. mknod of devices fails (no
# CAP_MKNOD, nodev mount); mkfifo and a socket file succeed, and the server
# must skip them: not saved, never opened, no hang.
import errno
import os
import socket
import stat

os.chdir("/work")
os.mkfifo("fifo")
print("mkfifo ok", flush=True)
os.symlink("fifo", "fifolink")
for name, mode, dev in (("null", stat.S_IFCHR, os.makedev(1, 3)), ("disk", stat.S_IFBLK, os.makedev(8, 0))):
    try:
        os.mknod(name, mode | 0o666, dev)
        print("mknod", name, "ESCAPED", flush=True)
    except OSError as e:
        print("mknod", name, errno.errorcode[e.errno], flush=True)
s = socket.socket(socket.AF_UNIX)
s.bind("/work/sock")
print("unix socket file ok", flush=True)
open("regular.txt", "w").write("regular\n")
# A writer that would feed the FIFO if anybody opened it, after the run.
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        fd = os.open("/work/fifo", os.O_WRONLY)  # blocks until a reader comes
        os.write(fd, b"fed by a daemon\n")
        os._exit(0)
    os._exit(0)
os.wait()
print("ready", flush=True)
