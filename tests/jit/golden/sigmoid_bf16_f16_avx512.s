jmp L1
L0:
L3:
cmp rdx, 16
jl L4
L6:
vpmovzxwd zmm0, ymmword ptr [rdi]
vpslld zmm0, zmm0, 16
vorps zmm2, zmm0, [L7] {1to16}
vminps zmm4, zmm2, [L8] {1to16}
vmaxps zmm4, zmm4, [L9] {1to16}
vmulps zmm5, zmm4, [L10] {1to16}
vrndscaleps zmm5, zmm5, 8
vfnmadd231ps zmm4, zmm5, [L11] {1to16}
vfnmadd231ps zmm4, zmm5, [L12] {1to16}
vbroadcastss zmm2, dword ptr [L13]
vfmadd213ps zmm2, zmm4, [L14] {1to16}
vfmadd213ps zmm2, zmm4, [L15] {1to16}
vfmadd213ps zmm2, zmm4, [L16] {1to16}
vfmadd213ps zmm2, zmm4, [L17] {1to16}
vfmadd213ps zmm2, zmm4, [L18] {1to16}
vfmadd213ps zmm2, zmm4, [L18] {1to16}
vaddps zmm5, zmm5, [L19] {1to16}
vscalefps zmm2, zmm2, zmm5
vmulps zmm3, zmm2, [L20] {1to16}
vaddps zmm3, zmm3, [L18] {1to16}
vbroadcastss zmm1, dword ptr [L18]
vdivps zmm1, zmm1, zmm3
vmulps zmm2, zmm2, zmm1
vmulps zmm2, zmm2, [L20] {1to16}
vcmpps k1, zmm0, [L21] {1to16}, 17
vblendmps zmm1 {k1}, zmm1, zmm2
vfixupimmps zmm1, zmm0, [L22] {1to16}, 0
vmovaps zmm0, zmm1
vcmpps k1, zmm0, zmm0, 3
vblendmps zmm1 {k1}, zmm0, [L23] {1to16}
vpternlogd zmm1 {k1}, zmm0, [L7] {1to16}, 248
vcvtps2ph ymmword ptr [rsi], zmm1, 0
add rdi, 32
add rsi, 32
sub rdx, 16
cmp rdx, 16
jge L6
L4:
test rdx, rdx
jle L5
mov eax, -1
bzhi eax, eax, edx
kmovw k1, eax
vpmovzxwd zmm0 {k1}{z}, ymmword ptr [rdi]
vpslld zmm0, zmm0, 16
vorps zmm2, zmm0, [L7] {1to16}
vminps zmm4, zmm2, [L8] {1to16}
vmaxps zmm4, zmm4, [L9] {1to16}
vmulps zmm5, zmm4, [L10] {1to16}
vrndscaleps zmm5, zmm5, 8
vfnmadd231ps zmm4, zmm5, [L11] {1to16}
vfnmadd231ps zmm4, zmm5, [L12] {1to16}
vbroadcastss zmm2, dword ptr [L13]
vfmadd213ps zmm2, zmm4, [L14] {1to16}
vfmadd213ps zmm2, zmm4, [L15] {1to16}
vfmadd213ps zmm2, zmm4, [L16] {1to16}
vfmadd213ps zmm2, zmm4, [L17] {1to16}
vfmadd213ps zmm2, zmm4, [L18] {1to16}
vfmadd213ps zmm2, zmm4, [L18] {1to16}
vaddps zmm5, zmm5, [L19] {1to16}
vscalefps zmm2, zmm2, zmm5
vmulps zmm3, zmm2, [L20] {1to16}
vaddps zmm3, zmm3, [L18] {1to16}
vbroadcastss zmm1, dword ptr [L18]
vdivps zmm1, zmm1, zmm3
vmulps zmm2, zmm2, zmm1
vmulps zmm2, zmm2, [L20] {1to16}
vcmpps k2, zmm0, [L21] {1to16}, 17
vblendmps zmm1 {k2}, zmm1, zmm2
vfixupimmps zmm1, zmm0, [L22] {1to16}, 0
vmovaps zmm0, zmm1
vcmpps k2, zmm0, zmm0, 3
vblendmps zmm1 {k2}, zmm0, [L23] {1to16}
vpternlogd zmm1 {k2}, zmm0, [L7] {1to16}, 248
vcvtps2ph ymmword ptr [rsi] {k1}, zmm1, 0
L5:
L2:
vzeroupper
ret
L1:
jmp L0
align 64
align 4
L7:
.db 0x00, 0x00, 0x00, 0x80
align 4
L8:
.db 0x9A, 0x99, 0xB1, 0x42
align 4
L9:
.db 0x86, 0x5C, 0xFD, 0xC2
align 4
L10:
.db 0x3B, 0xAA, 0xB8, 0x3F
align 4
L11:
.db 0x18, 0x72, 0x31, 0x3F
align 4
L12:
.db 0x08, 0xE3, 0x02, 0xB1
align 4
L13:
.db 0x15, 0x12, 0xB5, 0x3A
align 4
L14:
.db 0xE8, 0x1C, 0x09, 0x3C
align 4
L15:
.db 0x79, 0xAC, 0x2A, 0x3D
align 4
L16:
.db 0x49, 0xAA, 0x2A, 0x3E
align 4
L17:
.db 0xFE, 0xFF, 0xFF, 0x3E
align 4
L18:
.db 0x00, 0x00, 0x80, 0x3F
align 4
L19:
.db 0x00, 0x00, 0x00, 0x42
align 4
L20:
.db 0x00, 0x00, 0x80, 0x2F
align 4
L21:
.db 0x00, 0x00, 0x00, 0x00
align 4
L22:
.db 0x22, 0x00, 0x00, 0x00
align 4
L23:
.db 0x00, 0x00, 0xC0, 0x7F
