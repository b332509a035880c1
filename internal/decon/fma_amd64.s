#include "textflag.h"

// func axpyFMAVec(o, s *float32, n int, kv float32)
// o[i] = kv*s[i] + o[i], one rounding (FMA), for i < n: 32 at a time, then
// 8, then one.
TEXT ·axpyFMAVec(SB), NOSPLIT, $0-28
	MOVQ         o+0(FP), DI
	MOVQ         s+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS kv+24(FP), Y0

loop32:
	CMPQ        CX, $32
	JLT         loop8
	VMOVUPS     (DI), Y1
	VMOVUPS     32(DI), Y2
	VMOVUPS     64(DI), Y3
	VMOVUPS     96(DI), Y4
	VFMADD231PS (SI), Y0, Y1
	VFMADD231PS 32(SI), Y0, Y2
	VFMADD231PS 64(SI), Y0, Y3
	VFMADD231PS 96(SI), Y0, Y4
	VMOVUPS     Y1, (DI)
	VMOVUPS     Y2, 32(DI)
	VMOVUPS     Y3, 64(DI)
	VMOVUPS     Y4, 96(DI)
	ADDQ        $128, DI
	ADDQ        $128, SI
	SUBQ        $32, CX
	JMP         loop32

loop8:
	CMPQ        CX, $8
	JLT         tail
	VMOVUPS     (DI), Y1
	VFMADD231PS (SI), Y0, Y1
	VMOVUPS     Y1, (DI)
	ADDQ        $32, DI
	ADDQ        $32, SI
	SUBQ        $8, CX
	JMP         loop8

tail:
	CMPQ        CX, $0
	JEQ         done
	VMOVSS      (DI), X1
	VFMADD231SS (SI), X0, X1
	VMOVSS      X1, (DI)
	ADDQ        $4, DI
	ADDQ        $4, SI
	DECQ        CX
	JMP         tail

done:
	VZEROUPPER
	RET
