#!/usr/bin/env bash
# cli/slurm/prove-array.sbatch through a real Slurm: a one-node cluster (Debian's slurmctld, slurmd and munge,
# .ci/install-deps) started for the test under WORKDIR, the script submitted as a job array of 3 tasks on a
# small input range, `merge` as a job that depends on the array, and the merged JSON compared byte for byte
# with one process's; with "mpi" (a qmx-sim built with Open MPI), cli/slurm/prove-mpi.sbatch too, as one job
# of 2 tasks that srun starts through PMIx. Exits 77 (ctest: skipped, with the reason) without the Slurm
# daemons or as a user that cannot start them.
# Usage: slurm.sh QMX_SIM SOURCE_DIR WORKDIR [mpi]
set -euo pipefail
q=$(realpath "$1") src=$(realpath "$2") work=$3 mpi=${4:-}
skip() { echo "scaleout.slurm skipped: $*"; exit 77; }
for t in slurmctld slurmd sbatch munged munge; do command -v "$t" > /dev/null || skip "$t is not installed (.ci/install-deps installs Slurm)"; done
[ "$(id -u)" = 0 ] || skip "the one-node cluster's daemons run as root here"
for port in 6817 6818; do
  ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2> /dev/null || skip "port $port is taken (another Slurm runs here)"
done
rm -rf "$work" && mkdir -p "$work/state" "$work/spool" "$work/run"
export SLURM_CONF=$work/slurm.conf
cat > "$SLURM_CONF" <<CONF
ClusterName=qmxtest
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
NodeName=localhost CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=ci Nodes=localhost Default=YES MaxTime=10 State=UP
CONF
# munged: the running one, or one started here (as the munge user, with the key the package made).
if ! munge -n 2> /dev/null | unmunge > /dev/null 2>&1; then
  mkdir -p /run/munge
  chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
  runuser -u munge -- munged || skip "munged did not start"
fi
stop() {  # the whole cluster down (scontrol shutdown), then whatever of it is left, waited for
  scontrol shutdown > /dev/null 2>&1 || true
  local pids=()
  for d in slurmd slurmctld; do [ -f "$work/$d.pid" ] && pids+=("$(cat "$work/$d.pid")"); done
  for _ in $(seq 1 40); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2> /dev/null && alive=1; done
    [ $alive = 0 ] && return 0
    sleep 0.25
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null || true; done
}
trap stop EXIT
t0=$SECONDS
slurmctld
slurmd
for _ in $(seq 1 120); do sinfo -h -o %T 2> /dev/null | grep -q idle && break; sleep 0.25; done
sinfo -h -o %T | grep -q idle || { tail -n 20 "$work"/slurm*.log; echo "scaleout.slurm: the node did not come up" >&2; exit 1; }
echo "one-node Slurm up in $((SECONDS - t0)) s"
range=(--range 0x3F7F0000:0x00030001 --quiet)
"$q" prove --to e4m3 e5m2 e2m1 --round all --sat all "${range[@]}" --out "$work/whole.json"
cd "$work/run"
export QMX_SIM=$q
jid=$(sbatch --parsable --array=0-2 --cpus-per-task=1 --time=5 "$src/cli/slurm/prove-array.sbatch" "${range[@]}")
sbatch --wait --dependency=afterok:"$jid" --time=5 --output=merge.log --wrap "$q merge prove-shards --out prove.json" > /dev/null ||
  { tail -n 20 ./*.log; echo "scaleout.slurm: the merge job failed" >&2; exit 1; }
ls prove-shards/prove-shard-{0,1,2}-of-3.json > /dev/null
cmp "$work/whole.json" prove.json || { echo "scaleout.slurm: the array's merged proof differs from one process's" >&2; exit 1; }
grep -q '"mismatches": 0' prove.json
echo "scaleout.slurm: 3 array tasks merged equal one process's bytes ($((SECONDS - t0)) s with the cluster's start)"
[ "$mpi" = mpi ] || exit 0
# The MPI script: 2 ranks on the one node (Open MPI refuses root unless told; the CI runs as root).
mkdir -p "$work/mpi" && cd "$work/mpi"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
sbatch --wait --nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 --time=5 --output=mpi.log \
  "$src/cli/slurm/prove-mpi.sbatch" "${range[@]}" > /dev/null || { tail -n 30 mpi.log; echo "scaleout.slurm: the MPI job failed" >&2; exit 1; }
cmp "$work/whole.json" prove.json || { echo "scaleout.slurm: the MPI job's proof differs from one process's" >&2; exit 1; }
# That srun's tasks formed one MPI job of 2 ranks, not 2 one-rank jobs (which would each write the same file):
# prove refuses --shard only where it sees more than one rank.
if srun --mpi=pmix --ntasks=2 --time=2 "$q" prove --to e4m3 --round rne --sat satfinite --range 0:16 --quiet \
     --shard 0/2 --shard-dir shards > srun.log 2>&1; then
  cat srun.log; echo "scaleout.slurm: srun --mpi=pmix started 2 one-rank jobs, not one job of 2 ranks" >&2; exit 1
fi
grep -q "under MPI the ranks split the work" srun.log || { cat srun.log; echo "scaleout.slurm: srun failed otherwise" >&2; exit 1; }
echo "scaleout.slurm: the MPI job's 2 ranks under srun --mpi=pmix equal one process's bytes ($((SECONDS - t0)) s in all)"
