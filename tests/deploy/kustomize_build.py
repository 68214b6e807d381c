"""The deploy/ manifests as kustomize would render them, for
manifests_test.py: YAML loading, quantities, the strategic merge of an
overlay's patches, `kubectl kustomize` when installed, and a JUnit writer so
Bazel counts one case per check."""

import copy
import os
import re
import shutil
import subprocess
import unittest
from xml.sax.saxutils import quoteattr, escape

import yaml

_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
          "Ei": 2**60, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "P": 10**15, "E": 10**18, "m": 0.001, "": 1}


def quantity(value):
    """A Kubernetes quantity ("132Gi", "500m", "4", 1024) as a number."""
    match = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?",
                         str(value).strip())
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    return float(match.group(1)) * _UNITS[match.group(2) or ""]


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def manifest_files(directory):
    return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                  if n.endswith(".yaml") and n != "kustomization.yaml")


def kustomization(directory):
    (doc,) = load_yaml(os.path.join(directory, "kustomization.yaml"))
    return doc


# Strategic merge, enough for the patches of deploy/overlays: maps merge,
# these lists merge by key, every other list is replaced (as Kubernetes'
# strategic merge does for lists without a patchMergeKey, e.g. tolerations).
MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name",
              "volumes": "name", "volumeMounts": "mountPath",
              "ports": "containerPort"}


def strategic_merge(base, patch, field=None):
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = (strategic_merge(base[key], value, key)
                        if key in base else copy.deepcopy(value))
        return out
    if isinstance(base, list) and isinstance(patch, list) and field in MERGE_KEYS:
        key = MERGE_KEYS[field]
        out = list(base)
        for item in patch:
            at = [i for i, b in enumerate(out) if b.get(key) == item.get(key)]
            if at:
                out[at[0]] = strategic_merge(out[at[0]], item)
            else:
                out.append(copy.deepcopy(item))
        return out
    return copy.deepcopy(patch)


def normalized(obj):
    """YAML text of obj (for a readable diff) with the lists merged by key in
    key order: kustomize puts a patch's new items first, the merge here last."""
    def walk(value, field=None):
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            value = [walk(v) for v in value]
            if field in MERGE_KEYS:
                value.sort(key=lambda item: str(item.get(MERGE_KEYS[field])))
        return value
    return yaml.safe_dump(walk(obj), sort_keys=True)


def build(directory):
    """Objects of a kustomization: its resources and generated ConfigMaps,
    then its patches merged."""
    k = kustomization(directory)
    objects = []
    for resource in k.get("resources", []):
        path = os.path.normpath(os.path.join(directory, resource))
        if os.path.isdir(path):
            objects += build(path)
        else:
            objects += load_yaml(path)
    objects += [generated_config_map(directory, g)
                for g in k.get("configMapGenerator", [])]
    for patch in k.get("patches", []):
        (doc,) = load_yaml(os.path.join(directory, patch["path"]))
        target = patch.get("target") or {}
        kind = target.get("kind", doc["kind"])
        name = target.get("name", doc["metadata"]["name"])
        hits = [i for i, o in enumerate(objects)
                if o["kind"] == kind and o["metadata"]["name"] == name]
        if len(hits) != 1:
            raise AssertionError(f"patch {patch['path']} matches {len(hits)} "
                                 f"objects ({kind}/{name})")
        objects[hits[0]] = strategic_merge(objects[hits[0]], doc)
    return objects


def generated_config_map(directory: str, generator: dict) -> dict:
    """A configMapGenerator's ConfigMap: each file's bytes under its name
    (or KEY=FILE). Only the unhashed form deploy/ uses is rendered here."""
    options = generator.get("options", {})
    if not options.get("disableNameSuffixHash"):
        raise AssertionError(f"{generator['name']}: a hashed name is not "
                             "rendered here (disableNameSuffixHash: true)")
    if set(generator) - {"name", "namespace", "files", "options"}:
        raise AssertionError(f"{generator['name']}: only files are rendered")
    data = {}
    for entry in generator["files"]:
        key, _, path = entry.rpartition("=")
        with open(os.path.join(directory, path), encoding="utf-8") as f:
            data[key or os.path.basename(path)] = f.read()
    metadata = {"name": generator["name"]}
    if "namespace" in generator:
        metadata["namespace"] = generator["namespace"]
    if options.get("labels"):
        metadata["labels"] = dict(options["labels"])
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
            "data": data}


def kubectl_build(directory):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise unittest.SkipTest("kubectl is not installed")
    # Bazel's runfiles are symlinks out of the kustomization root.
    run = subprocess.run(
        [kubectl, "kustomize", "--load-restrictor", "LoadRestrictionsNone",
         directory], capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory}: {run.stderr}")
    return [d for d in yaml.safe_load_all(run.stdout) if d is not None]


def only(objects, kind):
    found = [o for o in objects if o["kind"] == kind]
    if len(found) != 1:
        raise AssertionError(f"expected one {kind}, found {len(found)}")
    return found[0]


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v
                                  for k, v in selector.items())


class _Recorder(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cases = []  # (class, name, outcome, detail)

    def _add(self, test, outcome, detail=""):
        self.cases.append((type(test).__name__,
                           getattr(test, "_testMethodName", str(test)),
                           outcome, detail))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._add(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._add(test, "failure", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._add(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._add(test, "skipped", reason)


def write_junit(path, cases):
    """One <testcase> per check. tests= counts the checks that ran (not the
    skipped ones), which is what scripts/test adds up."""
    ran = [c for c in cases if c[2] != "skipped"]
    failures = sum(c[2] == "failure" for c in cases)
    errors = sum(c[2] == "error" for c in cases)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<testsuites>",
             f'<testsuite name="manifests_test" tests="{len(ran)}" '
             f'failures="{failures}" errors="{errors}" '
             f'skipped="{len(cases) - len(ran)}">']
    for cls, name, outcome, detail in cases:
        lines.append(f"<testcase classname={quoteattr(cls)} "
                     f"name={quoteattr(name)}>")
        if outcome in ("failure", "error"):
            lines.append(f"<{outcome} message={quoteattr(detail.splitlines()[-1])}>"
                         f"{escape(detail)}</{outcome}>")
        elif outcome == "skipped":
            lines.append(f"<skipped message={quoteattr(detail)}/>")
        lines.append("</testcase>")
    lines += ["</testsuite>", "</testsuites>"]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
