"""`scontrol show ... -o` parsing on real output shapes (no Slurm needed)."""

from app.controller.schedulers.slurm import CKPT_COMMENT, parse_record

JOB = ("JobId=42 JobName=train.py UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901757 "
       "Nice=0 Account=(null) QOS=(null) JobState=PENDING Reason=BeginTime Dependency=(null) Requeue=1 "
       "Restarts=2 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=UNLIMITED "
       "SubmitTime=2026-11-30T14:52:11 EligibleTime=2026-11-30T14:54:12 StartTime=2026-11-30T14:54:12 "
       "Partition=debug ReqNodeList=(null) ExcNodeList=node[2,4] NodeList=(null) BatchHost=node1 "
       "NumNodes=2-2 NumCPUs=2 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=2,node=2,billing=2 "
       "Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* Command=/data/my jobs/train.py xid 1 "
       "WorkDir=/data/my jobs Comment=logdx_ckpt=/ckpt/run-7 note: retried twice "
       "StdOut=/data/my jobs/job-42.log Power=")
NODE = ("NodeName=node2 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State=IDLE+DRAIN ThreadsPerCore=1 "
        "Partitions=debug Reason=logdx: failed the node probe (job 42) [root@2026-11-30T14:53:01]")


def test_values_keep_their_spaces_and_inner_equals():
    rec = parse_record(JOB)
    assert rec["JobState"] == "PENDING" and rec["Restarts"] == "2"
    assert rec["Command"] == "/data/my jobs/train.py xid 1"
    assert rec["WorkDir"] == "/data/my jobs"
    assert rec["TRES"] == "cpu=2,node=2,billing=2"
    assert rec["ExcNodeList"] == "node[2,4]" and rec["Power"] == ""
    assert CKPT_COMMENT.search(rec["Comment"]).group(1) == "/ckpt/run-7"


def test_node_reason_with_spaces_and_brackets():
    rec = parse_record(NODE)
    assert rec["State"] == "IDLE+DRAIN"
    assert rec["Reason"] == "logdx: failed the node probe (job 42) [root@2026-11-30T14:53:01]"
