package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The committed launchers are what kernelgen writes from the committed
// sources: editing a .cu without `go generate ./internal/gpu` fails here.
func TestGeneratedUpToDate(t *testing.T) {
	want, err := generate(filepath.Join("..", "kernels"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("..", "launch_gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("internal/gpu/launch_gen.go is out of date: run go generate ./internal/gpu (make gpu-gen)")
	}
	for _, s := range []string{"DO NOT EDIT.", "//go:build cuda",
		"func (e *Engine) launchDeconConvKZ(kx, zb int, d dim, dst cu.DevicePtr,",
		"func (e *Engine) launchDeconHist(d dim, bins cu.DevicePtr, x cu.DevicePtr, n int64,"} {
		if !bytes.Contains(got, []byte(s)) {
			t.Errorf("launch_gen.go lacks %q", s)
		}
	}
}

const sample = `#include "common.cuh"
typedef long long i64;

// scale: x *= a over n items.
// Second line.
extern "C" __global__ void scale(float* __restrict__ x, const double* w,
    float a, i64 n, int m, unsigned int u)
{
    x[0] = a; /* extern "C" __global__ void not_a_kernel(int q) */
}

#define FIXED(KX, ZB)                                              \
    extern "C" __global__ void __launch_bounds__(256) conv_k##KX##_z##ZB(float* dst, \
        int nz, double eps)                                          \
    {                                                              \
        body<KX, ZB>(dst, nz, eps);                                \
    }
#define FIXED_Z(KX) FIXED(KX, 1) FIXED(KX, 4)
FIXED_Z(3)
FIXED_Z(5)

#define PLAIN(T) extern "C" __global__ void plain_##T(T* p) { }
PLAIN(float)
`

func TestParseModule(t *testing.T) {
	m, err := parseModule("s", sample)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range m.Kernels {
		names = append(names, k.Name)
	}
	want := []string{"scale", "conv_k3_z1", "conv_k3_z4", "conv_k5_z1", "conv_k5_z4", "plain_float"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("kernels %v, want %v", names, want)
	}
	k := m.Kernels[0]
	if k.Line != 6 || !reflect.DeepEqual(k.Doc, []string{"scale: x *= a over n items.", "Second line."}) {
		t.Errorf("scale: line %d doc %q", k.Line, k.Doc)
	}
	gotTypes := ""
	for _, p := range k.Params {
		gotTypes += p.Name + ":" + p.GoType + ":" + p.CType + " "
	}
	if wantTypes := "x:cu.DevicePtr:float* w:cu.DevicePtr:const double* a:float32:float n:int64:i64 m:int:int u:uint32:unsigned int "; gotTypes != wantTypes {
		t.Errorf("scale params %q, want %q", gotTypes, wantTypes)
	}
	if len(m.Families) != 1 {
		t.Fatalf("families %+v, want one (FIXED)", m.Families)
	}
	f := m.Families[0]
	if f.Macro != "FIXED" || f.Format != "conv_k%d_z%d" || !reflect.DeepEqual(f.Args, []string{"KX", "ZB"}) ||
		!reflect.DeepEqual(f.Members, want[1:5]) || len(f.Params) != 3 || f.Params[2].GoType != "float64" {
		t.Errorf("family %+v", f)
	}
}

func TestGenerateFamilyAndKernel(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "s.cu"), []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		`{"s", []string{"scale", "conv_k3_z1", "conv_k3_z4", "conv_k5_z1", "conv_k5_z4", "plain_float"}},`,
		"func (e *Engine) launchScale(d dim, x cu.DevicePtr, w cu.DevicePtr, a float32, n int64, m int, u uint32) {",
		`e.launchArgs("scale", d, uint64(x), uint64(w), uint64(math.Float32bits(a)), uint64(n), uint64(int64(m)), uint64(u))`,
		"func (e *Engine) launchConvKZ(kx, zb int, d dim, dst cu.DevicePtr, nz int, eps float64) {",
		`e.launchArgs(fmt.Sprintf("conv_k%d_z%d", kx, zb), d, uint64(dst), uint64(int64(nz)), math.Float64bits(eps))`,
		"func (e *Engine) launchPlainFloat(d dim, p cu.DevicePtr) {",
	} {
		if !strings.Contains(string(src), s) {
			t.Errorf("generated code lacks %s\n%s", s, src)
		}
	}
}

func TestBadSources(t *testing.T) {
	for _, c := range []struct{ src, err string }{
		{`extern "C" __global__ void k(short x) {}`, `parameter x: C type "short" has no Go launcher type`},
		{`extern "C" __global__ void k(int) {}`, `want a type and a name`},
		{"#define M(A, B) extern \"C\" __global__ void k_##A(int B) {}\nM(1)", "M takes 2 arguments, got 1"},
	} {
		_, err := parseModule("bad", c.src)
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%q: error %v, want one containing %q", c.src, err, c.err)
		}
	}
	dir := t.TempDir()
	for _, n := range []string{"a.cu", "b.cu"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(`extern "C" __global__ void twice(int n) {}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := generate(dir); err == nil || !strings.Contains(err.Error(), "kernel twice already defined in a.cu") {
		t.Errorf("duplicate kernel: error %v", err)
	}
}
