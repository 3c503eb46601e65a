"""Resolve CloudFormation intrinsic functions in the expanded template for a local stack.

Only what a deployed stack would compute: parameters (defaults unless overridden), pseudo
parameters, conditions, mappings, and the Ref/GetAtt values of resources that the local stack
has given physical ids. Anything else raises Unsupported, naming the construct.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

NO_VALUE = object()  # AWS::NoValue: the property is dropped


class Unsupported(Exception):
    """A template construct the local stack cannot evaluate."""


@dataclass
class Scope:
    parameters: dict[str, Any]
    mappings: dict[str, Any]
    conditions: dict[str, Any]
    region: str
    account_id: str
    stack_name: str
    # Ref / GetAtt answers for resources, supplied by the local stack (created on demand).
    ref: Callable[[str], Any] = field(default=lambda logical_id: logical_id)
    get_att: Callable[[str, str], Any] = field(default=lambda logical_id, attr: f"{logical_id}.{attr}")
    _condition_cache: dict[str, bool] = field(default_factory=dict)

    def pseudo(self, name: str) -> Any:
        values = {
            "AWS::Region": self.region,
            "AWS::AccountId": self.account_id,
            "AWS::StackName": self.stack_name,
            "AWS::StackId": (f"arn:aws:cloudformation:{self.region}:{self.account_id}:stack/{self.stack_name}/local"),
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::NoValue": NO_VALUE,
        }
        if name not in values:
            raise Unsupported(f"pseudo parameter {name}")
        return values[name]

    def condition(self, name: str) -> bool:
        if name not in self._condition_cache:
            if name not in self.conditions:
                raise Unsupported(f"condition {name} is not declared")
            self._condition_cache[name] = bool(self.resolve(self.conditions[name]))
        return self._condition_cache[name]

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [item for item in (self.resolve(v) for v in value) if item is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            handler = _INTRINSICS.get(key)
            if handler is not None:
                return handler(self, arg)
        return {k: r for k, r in ((k, self.resolve(v)) for k, v in value.items()) if r is not NO_VALUE}

    def rule_failures(self, rules: dict[str, Any]) -> list[str]:
        """AssertDescription of every failed assertion of the template's Rules, as CloudFormation refuses them."""
        failures = []
        for name, rule in rules.items():
            if "RuleCondition" in rule and not self.resolve(rule["RuleCondition"]):
                continue
            for assertion in rule["Assertions"]:
                if not self.resolve(assertion["Assert"]):
                    failures.append(f"{name}: {assertion.get('AssertDescription', 'assertion failed')}")
        return failures

    def ref_value(self, name: str) -> Any:
        if name.startswith("AWS::"):
            return self.pseudo(name)
        if name in self.parameters:
            return self.parameters[name]
        return self.ref(name)


def _ref(scope: Scope, name: str) -> Any:
    return scope.ref_value(name)


def _get_att(scope: Scope, arg: Any) -> Any:
    if isinstance(arg, str):
        arg = arg.split(".", 1)
    logical_id, attribute = (scope.resolve(a) for a in arg)
    return scope.get_att(logical_id, attribute)


_SUB_VARIABLE = re.compile(r"\$\{([^}!]+)\}")


def _sub(scope: Scope, arg: Any) -> str:
    text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
    local = {name: scope.resolve(v) for name, v in variables.items()}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1).strip()
        if name in local:
            return str(local[name])
        if "." in name and not name.startswith("AWS::"):
            logical_id, attribute = name.split(".", 1)
            return str(scope.get_att(logical_id, attribute))
        return str(scope.ref_value(name))

    return _SUB_VARIABLE.sub(replace, text).replace("${!", "${")


def _find_in_map(scope: Scope, arg: Any) -> Any:
    name, top, second = (str(scope.resolve(a)) for a in arg[:3])
    try:
        return scope.mappings[name][top][second]
    except KeyError as missing:
        # AWS::LanguageExtensions: a fourth argument {DefaultValue: ...} answers a missing key.
        if len(arg) == 4 and "DefaultValue" in arg[3]:
            return scope.resolve(arg[3]["DefaultValue"])
        raise Unsupported(f"Fn::FindInMap [{name}, {top}, {second}] has no entry {missing}") from None


def _if(scope: Scope, arg: Any) -> Any:
    name, when_true, when_false = arg
    return scope.resolve(when_true if scope.condition(name) else when_false)


def _join(scope: Scope, arg: Any) -> str:
    delimiter, items = arg
    return str(delimiter).join(str(i) for i in scope.resolve(items))


def _select(scope: Scope, arg: Any) -> Any:
    index, items = scope.resolve(arg[0]), scope.resolve(arg[1])
    return items[int(index)]


def _split(scope: Scope, arg: Any) -> list[str]:
    delimiter, text = arg
    return str(scope.resolve(text)).split(delimiter)


def _equals(scope: Scope, arg: Any) -> bool:
    left, right = (scope.resolve(a) for a in arg)
    return str(left) == str(right)


def _not(scope: Scope, arg: Any) -> bool:
    return not scope.resolve(arg[0])


def _and(scope: Scope, arg: Any) -> bool:
    return all(scope.resolve(a) for a in arg)


def _or(scope: Scope, arg: Any) -> bool:
    return any(scope.resolve(a) for a in arg)


def _contains(scope: Scope, arg: Any) -> bool:
    """Rule function: the string is one of the list's values."""
    values, value = scope.resolve(arg[0]), scope.resolve(arg[1])
    return str(value) in {str(v) for v in values}


def _condition(scope: Scope, name: str) -> bool:
    return scope.condition(name)


def _to_json_string(scope: Scope, arg: Any) -> str:
    return json.dumps(scope.resolve(arg))


def _get_azs(scope: Scope, arg: Any) -> list[str]:
    return [f"{scope.region}{zone}" for zone in "abc"]


_INTRINSICS: dict[str, Callable[[Scope, Any], Any]] = {
    "Ref": _ref,
    "Fn::GetAtt": _get_att,
    "Fn::Sub": _sub,
    "Fn::FindInMap": _find_in_map,
    "Fn::If": _if,
    "Fn::Join": _join,
    "Fn::Select": _select,
    "Fn::Split": _split,
    "Fn::Equals": _equals,
    "Fn::Not": _not,
    "Fn::And": _and,
    "Fn::Or": _or,
    "Condition": _condition,
    "Fn::Contains": _contains,
    "Fn::ToJsonString": _to_json_string,
    "Fn::GetAZs": _get_azs,
}
