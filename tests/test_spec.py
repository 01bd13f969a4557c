"""Bad tool specs fail at load with the file, the JSON path and what is wrong."""

import json

import pytest

from seal_envs.spec import SpecError, load_domain

GOOD_TOOL = {
    "name": "ping", "description": "Ping.", "implementation": "pkg.mod:Cls.ping",
    "parameters": {"type": "object", "properties": {"host": {"type": "string"}}, "required": ["host"]},
}


def write(tmp_path, doc):
    (tmp_path / "tools.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return tmp_path


def domain(*tools):
    return {"domain": "net", "description": "Network tools.", "tools": list(tools)}


def test_good_spec_loads(tmp_path):
    d = load_domain(write(tmp_path, domain(GOOD_TOOL)))
    tool = d.tool("ping")
    assert tool.required == ("host",) and tool.class_path == "pkg.mod:Cls" and tool.method == "ping"
    assert tool.openai_schema()["function"]["name"] == "ping"


@pytest.mark.parametrize("mutate, path, words", [
    (lambda t: t.pop("description"), "$.tools[0]", "'description' is a required property"),
    (lambda t: t.update(implementation="no_colon"), "$.tools[0].implementation", "does not match"),
    (lambda t: t["parameters"].update(type="array"), "$.tools[0].parameters.type", "'object' was expected"),
    (lambda t: t["parameters"]["properties"]["host"].update(type="text"), "$.tools[0].parameters.properties.host.type", "not valid"),
    (lambda t: t["parameters"].update(required=["port"]), "$.tools[0].parameters.required", "not in 'properties'"),
    (lambda t: t.update(colour="blue"), "$.tools[0]", "Additional properties"),
])
def test_bad_specs_name_file_path_and_problem(tmp_path, mutate, path, words):
    tool = json.loads(json.dumps(GOOD_TOOL))
    mutate(tool)
    with pytest.raises(SpecError) as err:
        load_domain(write(tmp_path, domain(tool)))
    assert err.value.json_path == path and words in err.value.problem
    assert str(tmp_path / "tools.json") in str(err.value)


def test_invalid_json_reports_line(tmp_path):
    with pytest.raises(SpecError, match=r"not valid JSON: .*line 1"):
        load_domain(write(tmp_path, "{"))


def test_duplicate_tool_names(tmp_path):
    with pytest.raises(SpecError, match="duplicate tool name 'ping'"):
        load_domain(write(tmp_path, domain(GOOD_TOOL, GOOD_TOOL)))


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="file not found"):
        load_domain(tmp_path)


def test_a_domain_can_declare_its_own_task_splits(tmp_path):
    (tmp_path / "splits.py").write_text("def two(split):\n    return ('t1', 't2') if split == 'train' else ('e1',)\n")
    d = load_domain(write(tmp_path, {**domain(GOOD_TOOL), "task_splits": "splits:two"}))
    assert d.split_tasks("train") == ("t1", "t2") and d.split_tasks("eval") == ("e1",)
    assert load_domain("bfcl").task_splits == "splits:bfcl_tasks"
    assert len(load_domain("shop").split_tasks("eval")) == 24  # tool_specs/shop/synthetic.py
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ValueError, match="declares no task_splits"):
        load_domain(write(plain, domain(GOOD_TOOL))).split_tasks("train")
    with pytest.raises(SpecError) as err:
        load_domain(write(tmp_path, {**domain(GOOD_TOOL), "task_splits": "not a callable path"}))
    assert err.value.json_path == "$.task_splits"
