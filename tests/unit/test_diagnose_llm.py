"""The optional LLM agent and the rule-learning loop, against a local fake endpoint."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from slurm_acme.cli.main import sacme
from slurm_acme.diagnose import diagnose
from slurm_acme.diagnose.api import default_rulebook
from slurm_acme.diagnose.corpus import LabelledCase, load_corpus
from slurm_acme.diagnose.learning import Proposal, validate_proposal
from slurm_acme.diagnose.llm import LLMAgent, LLMSettings, parse_answer

NEW_FAILURE = [
    "step 900 ok",
    "tokenizer shard checksum drift detected on shard 17 (manifest says 9f2c)",
    "train.py aborted by the wrapper",
]


class FakeEndpoint:
    """An OpenAI-compatible /chat/completions that replays canned answers."""

    def __init__(self) -> None:
        self.answers: list[dict | str] = []
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
                answer = outer.answers.pop(0) if outer.answers else {}
                content = answer if isinstance(answer, str) else json.dumps(answer)
                payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args) -> None:  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[FakeEndpoint]:
    fake = FakeEndpoint()
    yield fake
    fake.close()


GOOD = {"category": "DataCorruption", "origin": "framework", "action": "rollback",
        "regex": "shard checksum drift detected", "confidence": 0.8, "reason": "a data shard changed under the job"}


def agent(endpoint: FakeEndpoint, learned: list | None = None) -> LLMAgent:
    settings = LLMSettings(endpoint=endpoint.url, model="fake-model", api_key="sekrit", timeout_s=5)
    callback = (lambda rule, text: learned.append((rule, text))) if learned is not None else None
    return LLMAgent(settings=settings, corpus=load_corpus(), on_rule_learned=callback)


def test_llm_answers_what_rules_and_retrieval_cannot_and_its_rule_is_learned(endpoint):
    endpoint.answers.append(GOOD)
    learned: list = []
    verdict = diagnose(NEW_FAILURE, cases=[], llm=agent(endpoint, learned))
    assert (verdict.category, verdict.origin, verdict.action, verdict.source) == (
        "DataCorruption", "framework", "rollback", "llm")
    assert verdict.evidence == (NEW_FAILURE[1],)
    [(rule, text)] = learned
    assert rule.pattern == "shard checksum drift detected" and "checksum drift" in text
    assert rule.keywords == ("shard checksum drift detected",)  # the line has no prefilter keyword
    book = default_rulebook().with_rules([rule])
    again = diagnose(NEW_FAILURE, rulebook=book, cases=[])
    assert (again.source, again.rule_id) == ("rule", rule.id)


def test_request_carries_model_key_compressed_log_and_nearest_cases(endpoint):
    endpoint.answers.append(GOOD)
    unrelated = [LabelledCase("k1", "KeyError", "script", "KeyError: 'tokens' in the batch dictionary")]
    diagnose(NEW_FAILURE, cases=unrelated, llm=agent(endpoint), threshold=0.99)
    [request] = endpoint.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["model"] == "fake-model" and request["auth"] == "Bearer sekrit"
    user = request["messages"][-1]["content"]
    assert "checksum drift detected" in user and "Nearest labelled cases" in user and "category=" in user


def test_over_broad_regex_is_not_learned_because_it_mislabels_the_corpus(endpoint):
    endpoint.answers.append({**GOOD, "regex": "[Ee]rror|checksum drift"})
    learned: list = []
    llm = agent(endpoint, learned)
    verdict = diagnose(NEW_FAILURE, cases=[], llm=llm)
    assert verdict.source == "llm" and verdict.rule_id is None
    assert learned == [] and "mislabel corpus case" in llm.last_verdict.reason


def test_regex_that_misses_its_own_case_is_not_learned(endpoint):
    endpoint.answers.append({**GOOD, "regex": "parity mismatch in shard"})
    llm = agent(endpoint, [])
    diagnose(NEW_FAILURE, cases=[], llm=llm)
    assert llm.learned == [] and "does not match" in llm.last_verdict.reason


def test_garbage_answer_or_dead_endpoint_leaves_the_honest_unknown(endpoint):
    endpoint.answers.append("I think it is probably the network?")
    llm = agent(endpoint)
    assert diagnose(NEW_FAILURE, cases=[], llm=llm).is_unknown
    assert "not the JSON" in llm.last_error
    dead = LLMAgent(settings=LLMSettings(endpoint="http://127.0.0.1:9/v1", model="m", timeout_s=2), corpus=[])
    assert diagnose(NEW_FAILURE, cases=[], llm=dead).is_unknown
    assert dead.last_error.startswith("LLM endpoint http://127.0.0.1:9/v1/chat/completions")


def test_llm_is_not_asked_when_a_rule_fires(endpoint):
    diagnose(["KeyError: 'x'"], llm=agent(endpoint))
    assert endpoint.requests == []


def test_parse_answer_accepts_fenced_json():
    proposal = parse_answer('Sure:\n```json\n{"category": "A", "origin": "script", "action": "stop", "regex": "x"}\n```')
    assert proposal == Proposal(category="A", origin="script", action="stop", regex="x")


def test_validate_rejects_bad_origin_action_and_regex():
    corpus, book = load_corpus(), default_rulebook()
    text = "\n".join(NEW_FAILURE)
    for bad, reason in (
        ({"origin": "unknown"}, "origin"), ({"action": "reboot"}, "action"), ({"regex": "("}, "does not compile"),
    ):
        proposal = Proposal(**{**{k: GOOD[k] for k in ("category", "origin", "action", "regex")}, **bad})
        assert reason in validate_proposal(proposal, case_text=text, corpus=corpus, rulebook=book).reason


def test_cli_with_llm_enabled_stores_the_learned_rule_and_uses_it_next_time(endpoint, tmp_path):
    config = tmp_path / "acme.toml"
    config.write_text(f'[diagnosis]\nretrieval_threshold = 0.99\n[diagnosis.llm]\nenabled = true\nendpoint = "{endpoint.url}"\nmodel = "fake-model"\n')
    log = tmp_path / "job.log"
    log.write_text("\n".join(NEW_FAILURE) + "\n")
    db = f"sqlite:///{tmp_path / 'acme.db'}"
    endpoint.answers.append(GOOD)
    runner = CliRunner()
    first = runner.invoke(sacme, ["--config", str(config), "--db", db, "diagnose", str(log), "--json"], catch_exceptions=False)
    assert json.loads(first.output)["source"] == "llm"
    second = runner.invoke(sacme, ["--config", str(config), "--db", db, "diagnose", str(log), "--json"], catch_exceptions=False)
    data = json.loads(second.output)
    assert (data["source"], data["category"]) == ("rule", "DataCorruption")
    assert data["rule_id"].startswith("learned-DataCorruption-")
    assert len(endpoint.requests) == 1
