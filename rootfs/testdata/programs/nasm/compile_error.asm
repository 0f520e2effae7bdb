        global _start
        section .text
_start:
        mov rax, nosuchlabel
        frobnicate rdi
