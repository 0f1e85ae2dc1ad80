"""PostgreSQL side of the benchmark harness: psql and pgbench subprocesses against the throwaway
cluster that bench/run started (tests/lib/cluster.sh), run as the cluster's owner.

The connection comes from the environment bench/run exports: CLUSTER_DIR (socket directory),
CLUSTER_PORT, CLUSTER_OWNER, PG_BINDIR.

    pg = Pg.from_env()
    pg.sql("select 1")                         -> rows as lists of strings
    pg.copy_in("COPY t FROM STDIN (FORMAT binary)", writer)
    pg.timed("select ...", settings, reps)     -> seconds of each run (psql \\timing)
    pg.pgbench(script, clients, seconds, settings) -> dict(tps, p50_ms, p99_ms, count, ...)
"""
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time


class PgError(RuntimeError):
    pass


class Pg:
    def __init__(self, host, port, owner, bindir, dbname="postgres"):
        self.host, self.port, self.owner, self.bindir, self.dbname = host, port, owner, bindir, dbname
        self.tmp = None

    @classmethod
    def from_env(cls):
        try:
            return cls(os.environ["CLUSTER_DIR"], os.environ["CLUSTER_PORT"],
                       os.environ["CLUSTER_OWNER"], os.environ["PG_BINDIR"])
        except KeyError as e:
            raise SystemExit(f"sql_runner: {e} not set (start the cluster through bench/run)")

    # -- processes ---------------------------------------------------------------------------
    def _env(self, settings=None):
        env = {"PATH": self.bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
               "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH", ""),
               "PGHOST": self.host, "PGPORT": str(self.port), "PGUSER": "postgres",
               "PGDATABASE": self.dbname, "PGOPTIONS": options(settings), "LC_ALL": "C"}
        return env

    def cmd(self, argv, settings=None):
        """argv run as the cluster owner with the connection environment (a list for Popen)."""
        env = self._env(settings)
        envl = ["env", "-i"] + [f"{k}={v}" for k, v in env.items()]
        if pwd.getpwuid(os.getuid()).pw_name == self.owner:
            return envl + argv
        return ["runuser", "-u", self.owner, "--"] + envl + argv

    def psql_argv(self, *extra):
        return [os.path.join(self.bindir, "psql"), "-X", "-q", "-At", "-F", "\t",
                "-v", "ON_ERROR_STOP=1", *extra]

    def run(self, sql, settings=None, timeout=None, stdin=None):
        """Runs SQL text (one or more statements) through psql; returns stdout."""
        p = subprocess.run(self.cmd(self.psql_argv(), settings), input=sql.encode(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, cwd=self.host)
        if p.returncode != 0:
            raise PgError(f"psql failed ({p.returncode}): {p.stderr.decode(errors='replace').strip()}\n"
                          f"-- sql: {sql[:500]}")
        return p.stdout.decode()

    def run_messages(self, sql, settings=None, timeout=None):
        """Like run, but returns (stdout, stderr): the server's messages at client_min_messages."""
        p = subprocess.run(self.cmd(self.psql_argv(), settings), input=sql.encode(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, cwd=self.host)
        if p.returncode != 0:
            raise PgError(f"psql failed ({p.returncode}): {p.stderr.decode(errors='replace').strip()}\n"
                          f"-- sql: {sql[:500]}")
        return p.stdout.decode(), p.stderr.decode(errors="replace")

    def sql(self, sql, settings=None, timeout=None):
        out = self.run(sql, settings, timeout)
        return [line.split("\t") for line in out.splitlines() if line != ""]

    def value(self, sql, settings=None):
        rows = self.sql(sql, settings)
        return rows[0][0] if rows else None

    def sql_timed(self, sql, settings=None):
        """(rows, seconds): the statement's rows and its server round trip (psql's \\timing,
        so without psql's own start-up)."""
        p = subprocess.run(self.cmd(self.psql_argv(), settings),
                           input=("\\timing on\n" + sql.rstrip().rstrip(";") + ";\n").encode(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.host)
        if p.returncode != 0:
            raise PgError(f"psql failed: {p.stderr.decode(errors='replace').strip()}\n-- sql: {sql[:300]}")
        rows, secs = [], None
        for line in p.stdout.decode().splitlines():
            m = re.match(r"^Time: ([0-9.]+) ms", line)
            if m:
                secs = float(m.group(1)) / 1e3
            elif line:
                rows.append(line.split("\t"))
        return rows, secs

    def copy_in(self, copy_sql, writer, timeout=None):
        """COPY ... FROM STDIN with the data produced by writer(binary_stream)."""
        with tempfile.TemporaryFile() as errf:
            p = subprocess.Popen(self.cmd(self.psql_argv("-c", copy_sql)), stdin=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, stderr=errf, cwd=self.host)
            try:
                writer(p.stdin)
            except BrokenPipeError:
                pass
            finally:
                try:
                    p.stdin.close()
                except BrokenPipeError:
                    pass
            p.wait(timeout=timeout)
            errf.seek(0)
            err = errf.read()
        if p.returncode != 0:
            raise PgError(f"COPY failed: {err.decode(errors='replace').strip()}")

    def timed(self, sql, settings=None, reps=1, setup=""):
        """Runs sql reps times in one session (after setup, untimed); returns the server round
        trip of each run in seconds, from psql's \\timing."""
        script = setup + "\n\\timing on\n" + "\n".join([sql.rstrip().rstrip(";") + ";"] * reps) + "\n"
        p = subprocess.run(self.cmd(self.psql_argv(), settings), input=script.encode(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.host)
        if p.returncode != 0:
            raise PgError(f"psql failed: {p.stderr.decode(errors='replace').strip()}\n-- sql: {sql[:300]}")
        times = [float(m) / 1e3 for m in re.findall(r"^Time: ([0-9.]+) ms", p.stdout.decode(), re.M)]
        # the batch functions' DEBUG1 split of each run (client_min_messages = debug1): engine
        # calls, search ms, rows read, check ms, then (newer builds) queries read ms, answer rows
        # ms (kNN), the whole call's ms and the rows read on all-visible pages; '' where a build
        # does not say
        self.batch_splits = re.findall(
            r"_batch: \d+ queries, (\d+) engine calls ([0-9.]+) ms, (\d+) candidate rows read and "
            r"checked ([0-9.]+) ms(?:; queries read ([0-9.]+) ms(?:, answer rows ([0-9.]+) ms)?, "
            r"in all ([0-9.]+) ms(?:; (\d+) rows on all-visible pages)?)?", p.stderr.decode(errors="replace"))
        if len(times) != reps:
            raise PgError(f"expected {reps} timings, got {len(times)}: {p.stdout.decode()[-300:]}")
        return times

    # -- scratch files readable by the owner ----------------------------------------------------
    def scratch(self):
        if self.tmp is None:
            self.tmp = tempfile.mkdtemp(prefix="bench.", dir=self.host)
            if pwd.getpwuid(os.getuid()).pw_name != self.owner:
                shutil.chown(self.tmp, user=self.owner)
        return self.tmp

    def write_owned(self, name, text):
        p = os.path.join(self.scratch(), name)
        with open(p, "w") as f:
            f.write(text)
        if pwd.getpwuid(os.getuid()).pw_name != self.owner:
            shutil.chown(p, user=self.owner)
        return p

    # -- pgbench --------------------------------------------------------------------------------
    def pgbench(self, script, clients, seconds, settings=None, tick=None, timeout_grace=120):
        """Runs `pgbench -n -M prepared -c N -j N -T secs -f script --log` and returns
        steady_state()'s numbers (qps, p50_ms, p99_ms without each client's first transaction;
        tps, first_ms_max, all_p50_ms, all_p99_ms with it).  tick(fraction) is called about every
        0.25 s while it runs (progress bar)."""
        d = self.scratch()
        run_id = f"pgb{int(time.time() * 1000) % 10 ** 9}"
        sp = self.write_owned(run_id + "-script.sql", script)
        prefix = os.path.join(d, run_id)
        argv = [os.path.join(self.bindir, "pgbench"), "-n", "-M", "prepared",
                "-c", str(clients), "-j", str(clients), "-T", str(seconds), "-f", sp,
                "--log", "--log-prefix=" + prefix]
        p = subprocess.Popen(self.cmd(argv, settings), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             cwd=self.host)
        t0 = time.time()
        while p.poll() is None:
            if tick:
                tick(min(1.0, (time.time() - t0) / max(seconds, 1e-9)))
            time.sleep(0.25)
            if time.time() - t0 > seconds + timeout_grace:
                p.kill()
                raise PgError(f"pgbench did not finish {timeout_grace}s after its {seconds}s")
        out, err = p.communicate()
        out, err = out.decode(errors="replace"), err.decode(errors="replace")
        if p.returncode != 0:
            raise PgError(f"pgbench failed ({p.returncode}): {err.strip()[-800:]}")
        m = re.search(r"^tps = ([0-9.]+) \(without initial connection time\)", out, re.M)
        if not m:
            raise PgError(f"pgbench: no tps in output: {out[-500:]}")
        tps = float(m.group(1))
        txns = []  # (client, transaction number, latency ms, completion time s)
        for f in os.listdir(d):
            if f.startswith(run_id + "."):
                with open(os.path.join(d, f)) as fh:
                    for line in fh:
                        parts = line.split()
                        if len(parts) >= 6:
                            txns.append((int(parts[0]), int(parts[1]), int(parts[2]) / 1e3,
                                         int(parts[4]) + int(parts[5]) / 1e6))
                os.remove(os.path.join(d, f))
        os.remove(sp)
        if not txns:
            raise PgError("pgbench wrote no transaction log")
        fails = re.search(r"number of failed transactions: (\d+)", out)
        return steady_state(txns, tps, fails)


def steady_state(txns, tps, fails=None):
    """Numbers of a pgbench run without each client's first transaction, which pays the new
    backend's one-time setup (catalog caches, prepared statement, the in-backend CPU path's copy of
    the index): QPS over the window after every client finished its first one, percentiles over the
    later transactions.  Falls back to all transactions when too few are left."""
    first = {}
    for c, n, lat, end in txns:
        if c not in first or n < first[c][0]:
            first[c] = (n, lat, end)
    all_lat = sorted(t[2] for t in txns)
    res = {"tps": tps, "count": len(txns), "failed": int(fails.group(1)) if fails else 0,
           "first_ms_max": max(v[1] for v in first.values()),
           "all_p50_ms": pct(all_lat, 50), "all_p99_ms": pct(all_lat, 99)}
    t_start = max(v[2] for v in first.values())
    later = [t for t in txns if t[3] > t_start]
    t_end = max(t[3] for t in txns)
    if len(later) >= max(10, 2 * len(first)) and t_end - t_start > 0.5:
        lat = sorted(t[2] for t in later)
        res.update(qps=len(later) / (t_end - t_start), steady_count=len(later), steady=True,
                   p50_ms=pct(lat, 50), p99_ms=pct(lat, 99), mean_ms=sum(lat) / len(lat))
    else:
        res.update(qps=tps, steady_count=len(txns), steady=False, p50_ms=res["all_p50_ms"],
                   p99_ms=res["all_p99_ms"], mean_ms=sum(all_lat) / len(all_lat))
    return res


def pct(sorted_vals, q):
    """Nearest-rank percentile of a sorted list."""
    if not sorted_vals:
        return float("nan")
    i = max(0, min(len(sorted_vals) - 1, int(-(-q * len(sorted_vals) // 100)) - 1))
    return sorted_vals[i]


def options(settings):
    """PGOPTIONS string from a dict of settings."""
    if not settings:
        return ""
    return " ".join(f"-c {k}={v}" for k, v in settings.items())
