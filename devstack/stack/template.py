"""template.yaml, expanded by aws-sam-translator: the one source every test and the local stack read."""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import boto3
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator
from samtranslator.yaml_helper import yaml_parse

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = ROOT / "template.yaml"
LOCAL_REGION = "us-east-1"
# Local code paths are not S3 URIs; the translator only needs a well-formed placeholder.
_LOCAL_ARTIFACTS = "s3://local-artifacts/"
_LANGUAGE_EXTENSIONS = "AWS::LanguageExtensions"
_CODE_PROPERTIES = {"AWS::Serverless::Function": "CodeUri", "AWS::Serverless::LayerVersion": "ContentUri"}


@dataclass(frozen=True)
class Template:
    source: dict[str, Any]  # template.yaml as written (SAM)
    expanded: dict[str, Any]  # after the SAM transform (plain CloudFormation)
    code_paths: dict[str, Path]  # SAM logical id -> local CodeUri/ContentUri folder

    def resources(self, type_name: str | None = None) -> dict[str, dict[str, Any]]:
        return {
            logical_id: resource
            for logical_id, resource in self.expanded["Resources"].items()
            if type_name is None or resource["Type"] == type_name
        }

    def resource(self, logical_id: str) -> dict[str, Any]:
        return self.expanded["Resources"][logical_id]

    def parameter_defaults(self) -> dict[str, Any]:
        return {name: spec["Default"] for name, spec in self.source.get("Parameters", {}).items() if "Default" in spec}


def expand(
    source: dict[str, Any], region: str = LOCAL_REGION, base: Path = ROOT
) -> tuple[dict[str, Any], dict[str, Path]]:
    """Run the SAM transform offline: no credentials, no managed-policy lookups."""
    prepared = copy.deepcopy(source)
    code_paths: dict[str, Path] = {}
    global_code = prepared.get("Globals", {}).get("Function", {}).pop("CodeUri", None)
    if global_code is not None:  # applied per function so it is rewritten like theirs
        for resource in prepared.get("Resources", {}).values():
            if resource.get("Type") == "AWS::Serverless::Function":
                resource.setdefault("Properties", {}).setdefault("CodeUri", global_code)
    for logical_id, resource in prepared.get("Resources", {}).items():
        prop = _CODE_PROPERTIES.get(resource.get("Type"))
        uri = resource.get("Properties", {}).get(prop) if prop else None
        if isinstance(uri, str) and not uri.startswith("s3://"):
            path = (base / uri).resolve()
            code_paths[logical_id] = path
            resource["Properties"][prop] = _LOCAL_ARTIFACTS + str(path.relative_to(ROOT))
    translator = Translator(
        managed_policy_map={},
        sam_parser=Parser(),
        boto_session=boto3.session.Session(region_name=region),
    )
    expanded = translator.translate(sam_template=prepared, parameter_values={})
    # CloudFormation applies AWS::LanguageExtensions (Fn::FindInMap DefaultValue) before SAM; the
    # translator drops every transform, so the expansion keeps this one for cfn-lint and the local scope.
    transforms = source.get("Transform", [])
    if _LANGUAGE_EXTENSIONS in (transforms if isinstance(transforms, list) else [transforms]):
        expanded["Transform"] = _LANGUAGE_EXTENSIONS
    return expanded, code_paths


@lru_cache(maxsize=4)
def load_template(path: Path = TEMPLATE_PATH) -> Template:
    source = yaml_parse(path.read_text())
    expanded, code_paths = expand(source, base=path.resolve().parent)
    return Template(source=source, expanded=expanded, code_paths=code_paths)


def globals_environment(template: Template | None = None) -> dict[str, str]:
    """The literal environment every function gets (the template's Globals): Powertools reads it when a shared
    module builds its Logger or Metrics at import, so a process importing them outside a function's environment
    (the tests, the benchmarks) sets it first."""
    variables = (template or load_template()).source["Globals"]["Function"]["Environment"]["Variables"]
    return {name: value for name, value in variables.items() if isinstance(value, str)}


def main(argv: list[str]) -> int:
    """`python -m devstack.stack.template [OUT]`: write the expanded template for cfn-lint."""
    text = json.dumps(load_template().expanded, indent=2, default=str)
    if argv:
        Path(argv[0]).parent.mkdir(parents=True, exist_ok=True)
        Path(argv[0]).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
