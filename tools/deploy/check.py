"""Checks the deploy recipes under deploy/ (scripts/check-deploy.sh runs it):

- the Kubernetes manifest against the Kubernetes schemas (kubernetes-validate, strict);
- the ECS task definition against RegisterTaskDefinition's input (botocore's model);
- the systemd unit with `systemd-analyze verify`;
- the command line each recipe gives kcl-host: `kcl-host iam-policy` with the
  same arguments (its config file taken from the ConfigMap) must accept it.

Usage: check.py KCL_HOST_BINARY
"""
import json
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile

import botocore.session
import yaml
from botocore.validate import ParamValidator

root = pathlib.Path(__file__).resolve().parents[2]
deploy = root / "deploy"
kcl_host = sys.argv[1]
failures = []


def check(what, ok, detail=""):
    print(f"check-deploy: {what}: {'ok' if ok else 'FAILED'}")
    if not ok:
        failures.append(f"{what}: {detail}")


def accepts(what, run_args, files):
    """`kcl-host iam-policy` takes `run_args` (after `run`), with `files`
    (path in the recipe -> text) written to a temporary directory."""
    assert run_args[0] == "run", f"{what} runs `{run_args[0]}`, not `run`"
    with tempfile.TemporaryDirectory() as tmp:
        args = list(run_args[1:])
        for path, text in files.items():
            local = os.path.join(tmp, os.path.basename(path))
            pathlib.Path(local).write_text(text)
            args = [local if a == path else a for a in args]
        out = subprocess.run([kcl_host, "iam-policy", *args], capture_output=True, text=True)
        check(f"{what}: kcl-host accepts its arguments", out.returncode == 0, out.stderr.strip())


# Kubernetes.
manifest = deploy / "kubernetes" / "kcl-host.yaml"
out = subprocess.run(["kubernetes-validate", "--strict", str(manifest)], capture_output=True, text=True)
check("kubernetes manifest against the schemas", out.returncode == 0 and "INFO" in out.stdout, out.stdout + out.stderr)
documents = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
config = next(d for d in documents if d["kind"] == "ConfigMap")
deployment = next(d for d in documents if d["kind"] == "Deployment")
spec = deployment["spec"]["template"]["spec"]
container = spec["containers"][0]
check("kubernetes: the grace period covers a graceful stop (over 30 s calls)", spec["terminationGracePeriodSeconds"] > 30)
check("kubernetes: both probes on /healthz", all(container[p]["httpGet"]["path"] == "/healthz" for p in ("readinessProbe", "livenessProbe")))
accepts("kubernetes", container["args"], {"/etc/kcl-host/kcl-host.toml": config["data"]["kcl-host.toml"]})

# ECS.
task = json.loads((deploy / "ecs" / "task-definition.json").read_text())
ecs = botocore.session.get_session().get_service_model("ecs")
report = ParamValidator().validate(task, ecs.operation_model("RegisterTaskDefinition").input_shape)
check("ecs task definition against RegisterTaskDefinition", not report.has_errors(), report.generate_report())
container = task["containerDefinitions"][0]
check("ecs: stopTimeout covers a graceful stop (Fargate allows 120 s at most)", 30 < container["stopTimeout"] <= 120)
accepts("ecs", container["command"], {})

# systemd: verified with ExecStart pointing at this build.
unit = (deploy / "systemd" / "kcl-host.service").read_text()
exec_start = next(l for l in unit.splitlines() if l.startswith("ExecStart="))
with tempfile.TemporaryDirectory() as tmp:
    local = pathlib.Path(tmp) / "kcl-host.service"
    local.write_text(unit.replace("/usr/local/bin/kcl-host", kcl_host))
    out = subprocess.run(["systemd-analyze", "verify", str(local)], capture_output=True, text=True)
    # Its own complaints only: a container's systemd also names units of the host's.
    complaints = [l for l in (out.stdout + out.stderr).splitlines() if "kcl-host.service" in l]
    check("systemd unit (systemd-analyze verify)", not complaints, "\n".join(complaints))
args = shlex.split(exec_start.removeprefix("ExecStart=").replace("${CACHE_DIRECTORY}", tempfile.gettempdir()))
accepts("systemd", args[1:], {"/etc/kcl-host/kcl-host.toml": 'stream = "orders"\napplication = "orders-totals"\n'})

if failures:
    sys.exit("check-deploy: " + "\n".join(failures))
