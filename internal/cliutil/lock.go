package cliutil

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
)

// LockWaitEnv bounds how long a stage run waits for another run of the
// same output with the same parameters (a Go duration: "90s", "30m";
// "0": never wait). Outside SLURM a run does not wait unless it is set.
const LockWaitEnv = "KINTSUGI_LOCK_WAIT"

// LockJob says what a stage run computes, for its output lock.
type LockJob struct {
	Config *config.Config
	Stage  string // "stitch", "decon", "edf", "registration", "qc-<stage>"
	Cycle  int    // the cycle; 0 for the project-wide stages
	Device Device // "" where the stage has no device choice (QC)
	// Sentinel is the file that says the output is complete; "" means
	// <output>/.snakemake_complete (QC: qc_plots/.snakemake_complete_<stage>).
	Sentinel string
}

// schedulingKeys are the config keys that decide where and with what a job
// runs, not what it computes: they are left out of the parameters, so a
// rerun placed on another account or given more memory still counts as the
// same computation.
var schedulingKeys = []string{"resources", "live", "kintsugi_dir", "device"}

// LockParams is the fingerprint of what job computes: the SHA-256 (hex) of
// the stage, the cycle, the device, the executable (SHA-256 of its file)
// and the resolved config as JSON without the scheduling keys
// (schedulingKeys). It is the whole rest of the config, not only the keys
// the stage reads: a superset, so two runs with the same fingerprint
// produce the same output, and a change to any computing key makes a run
// a different one.
func LockParams(job LockJob) (string, error) {
	exe, err := executableHash()
	if err != nil {
		return "", err
	}
	cfg, err := json.Marshal(job.Config)
	if err != nil {
		return "", fmt.Errorf("lock parameters: config %s: %w", job.Config.Path, err)
	}
	var m map[string]any
	if err := json.Unmarshal(cfg, &m); err != nil {
		return "", fmt.Errorf("lock parameters: config %s: %w", job.Config.Path, err)
	}
	for _, k := range schedulingKeys {
		delete(m, k)
	}
	cfg, err = json.Marshal(m) // map keys sorted: the same config, the same bytes
	if err != nil {
		return "", fmt.Errorf("lock parameters: config %s: %w", job.Config.Path, err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "kintsugi lock parameters v1\nstage=%s\ncycle=%d\ndevice=%s\nexecutable=%s\nconfig=", job.Stage, job.Cycle, job.Device, exe)
	h.Write(cfg)
	return hex.EncodeToString(h.Sum(nil)), nil
}

var exeHash struct {
	once sync.Once
	sum  string
	err  error
}

// executableHash is the SHA-256 of the running executable's file.
func executableHash() (string, error) {
	exeHash.once.Do(func() {
		path, err := os.Executable()
		if err != nil {
			exeHash.err = fmt.Errorf("lock parameters: the executable's path: %w", err)
			return
		}
		f, err := os.Open(path)
		if err != nil {
			exeHash.err = fmt.Errorf("lock parameters: executable %s: %w", path, err)
			return
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			exeHash.err = fmt.Errorf("lock parameters: executable %s: %w", path, err)
			return
		}
		exeHash.sum = hex.EncodeToString(h.Sum(nil))
	})
	return exeHash.sum, exeHash.err
}

// LockContext returns ctx carrying the output-lock options of job for
// staging.NewContext: the parameters (LockParams) and the wait limit
// (WaitLimit). A malformed KINTSUGI_LOCK_WAIT is a usage error, before any
// work.
func LockContext(ctx context.Context, job LockJob, getenv func(string) string, lg *slog.Logger) (context.Context, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if lg == nil {
		lg = slog.Default()
	}
	params, err := LockParams(job)
	if err != nil {
		return nil, err
	}
	limit, err := parseLockWait(getenv(LockWaitEnv))
	if err != nil {
		return nil, err
	}
	start := time.Now()
	o := staging.Options{Params: params, Logger: lg, Sentinel: job.Sentinel,
		WaitUntil: func() (time.Time, string) { return WaitLimit(start, limit, getenv, squeueEndTime) }}
	return staging.WithOptions(ctx, o), nil
}

// parseLockWait reads KINTSUGI_LOCK_WAIT: -1 when unset.
func parseLockWait(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return -1, nil
	}
	if v == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, Usagef("environment variable %s=%q: want a duration >= 0 such as 90s or 30m (0: never wait)", LockWaitEnv, v)
	}
	return d, nil
}

// lockWaitMargin is how long before its SLURM end time a job stops
// waiting, so it can still exit with its own message (half the time left
// when that is less than twice the margin).
const lockWaitMargin = time.Minute

// WaitLimit decides until when a run may wait for a holder of its output
// with the same parameters, and says where the limit comes from. limit is
// KINTSUGI_LOCK_WAIT from start (-1: unset). Inside a SLURM job
// (SLURM_JOB_ID) the wait also ends lockWaitMargin before the job's end
// time: SLURM_JOB_END_TIME (Unix seconds) where set, else squeue's %e of
// the job (endTime: a zero time with a nil error for a job SLURM runs
// without an end time, which waits as long as the holder lives, or limit).
// A job SLURM does not know (endTime's error: SLURM_JOB_ID left in the
// environment of something that is not a SLURM job) waits only for limit.
// Outside SLURM without limit it does not wait (zero time): the run exits
// 4 naming the holder, at once.
func WaitLimit(start time.Time, limit time.Duration, getenv func(string) string, endTime func(jobID string) (time.Time, error)) (time.Time, string) {
	var until time.Time
	src := ""
	if limit >= 0 {
		until, src = start.Add(limit), fmt.Sprintf("%s=%s", LockWaitEnv, limit)
	}
	job := strings.TrimSpace(getenv("SLURM_JOB_ID"))
	if job == "" {
		if src == "" {
			return time.Time{}, "not a SLURM job and " + LockWaitEnv + " unset: no wait"
		}
		return until, src
	}
	var end time.Time
	endSrc := ""
	if v := strings.TrimSpace(getenv("SLURM_JOB_END_TIME")); v != "" {
		if s, err := strconv.ParseInt(v, 10, 64); err == nil && s > 0 {
			end, endSrc = time.Unix(s, 0), "SLURM_JOB_END_TIME"
		}
	}
	if end.IsZero() && endTime != nil {
		e, err := endTime(job)
		switch {
		case err != nil && src == "":
			return time.Time{}, fmt.Sprintf("SLURM cannot tell the end time of job %s (%v) and %s is unset: no wait", job, err, LockWaitEnv)
		case err == nil && e.IsZero() && src == "":
			return time.Now().AddDate(10, 0, 0), "SLURM job " + job + " has no end time: as long as the holder runs"
		case err == nil:
			end, endSrc = e, "squeue end time of job "+job
		}
	}
	if end.IsZero() {
		return until, src
	}
	margin := lockWaitMargin
	if left := time.Until(end); left < 2*margin {
		margin = left / 2
	}
	if stop := end.Add(-margin); until.IsZero() || stop.Before(until) {
		until, src = stop, fmt.Sprintf("%s %s less %s", endSrc, end.Format(time.RFC3339), margin.Round(time.Second))
	}
	return until, src
}

// squeueEndTime asks squeue for a job's end time (%e, local time): zero
// for a job without one (no time limit), an error when squeue does not
// know the job.
func squeueEndTime(jobID string) (time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "squeue", "-h", "-j", jobID, "-o", "%e").Output()
	if err != nil {
		return time.Time{}, fmt.Errorf("squeue -j %s: %w", jobID, err)
	}
	v := strings.TrimSpace(string(out))
	switch v {
	case "":
		return time.Time{}, fmt.Errorf("squeue -j %s: not in the queue", jobID)
	case "Unknown", "N/A", "NONE", "UNLIMITED", "INVALID":
		return time.Time{}, nil
	}
	t, err := time.ParseInLocation("2006-01-02T15:04:05", v, time.Local)
	if err != nil {
		return time.Time{}, fmt.Errorf("squeue -j %s end time %q: %w", jobID, v, err)
	}
	return t, nil
}
