"""The service's OpenAPI 3 document: the one source, served at ``GET /openapi.json`` and
committed as ``docs/openapi.json`` (a test holds the two equal; ``python -m leap_serving.http
--openapi`` prints it). Written out by hand: the routes parse their bodies themselves
(``bodies``), so there is no framework schema to generate it from.
"""

from __future__ import annotations

from typing import Any

from .bodies import BUDGET_FIELDS
from .config import MAX_BATCH, MAX_CANDIDATES

_REF = "#/components/schemas/"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF + name}


def _nullable(kind: str) -> dict[str, Any]:
    return {"type": [kind, "null"]}


def _answer(description: str, schema: str, media: str = "application/json") -> dict[str, Any]:
    return {"description": description, "content": {media: {"schema": _ref(schema)}}}


_ERRORS = {
    "401": _answer("no or a wrong bearer token (when the server names one)", "Error"),
    "413": _answer("the body passes the size limit", "Error"),
    "415": _answer("the content type is not JSON", "Error"),
    "504": _answer("no answer within the deadline", "Error"),
}
_BODY_ERRORS = {
    "400": _answer("the body is not JSON", "Error"),
    "422": _answer(
        "a field is missing or of the wrong type (the error names it), or the "
        "Ranker refused the launch (the ranking, with its reason_code)",
        "Error",
    ),
    "503": _answer("no model is loaded yet, or too many calls wait (Retry-After)", "Error"),
}

SCHEMAS: dict[str, Any] = {
    "Budget": {
        "type": "object",
        "additionalProperties": False,
        "description": "caps on the candidates; null for either is no cap",
        "properties": {
            BUDGET_FIELDS[0]: {"type": ["number", "null"], "exclusiveMinimum": 0},
            BUDGET_FIELDS[1]: {"type": ["integer", "null"], "minimum": 1},
        },
    },
    "Launch": {
        "type": "object",
        "additionalProperties": False,
        "required": ["job", "candidates"],
        "properties": {
            "job": {"type": "object", "description": "the launch config (docs/data-contract.md)"},
            "candidates": {
                "type": "array",
                "items": {"type": "string"},
                "maxItems": MAX_CANDIDATES,
            },
            "launch_date": {"type": "string", "format": "date"},
            "budget": _ref("Budget"),
        },
    },
    "Batch": {
        "type": "object",
        "additionalProperties": False,
        "required": ["launches"],
        "properties": {
            "launches": {
                "type": "array",
                "items": _ref("Launch"),
                "minItems": 1,
                "maxItems": MAX_BATCH,
                "description": "all with the same launch_date",
            }
        },
    },
    "CandidateScore": {
        "type": "object",
        "properties": {
            "hardware_type": {"type": "string"},
            "predicted_throughput": {"type": "number"},
            "cost_per_hour": {"type": "number"},
            "throughput_per_cost": {"type": "number"},
            "rank": _nullable("integer"),
            "bin": {"type": "integer"},
            "bin_probability": {"type": "number"},
            "history_found": {"type": "boolean"},
            "premium": {"type": "boolean"},
            "removed_reason": _nullable("string"),
            "removed_code": _nullable("string"),
            "roofline_throughput": _nullable("number"),
            "throughput_low": _nullable("number"),
            "throughput_high": _nullable("number"),
            "devices_per_host": {
                **_nullable("number"),
                "description": "the type's host size (the spec table's), which cost_per_hour "
                "priced a launch taking whole hosts on: what a hand-off asks each node for",
            },
        },
    },
    "Ranking": {
        "type": "object",
        "required": ["model_version", "ranking", "removed", "reason", "reason_code"],
        "properties": {
            "model_version": _nullable("string"),
            "ranking": {"type": "array", "items": _ref("CandidateScore")},
            "removed": {"type": "array", "items": _ref("CandidateScore")},
            "reason": _nullable("string"),
            "reason_code": _nullable("string"),
            "ignored_fields": {"type": "array", "items": {"type": "string"}},
            "novelty": _nullable("object"),
            "order": {"type": "string"},
            "order_reason": _nullable("string"),
            "interval_level": _nullable("number"),
            "worth_a_trial": _nullable("object"),
        },
    },
    "Rankings": {
        "type": "object",
        "required": ["rankings"],
        "properties": {"rankings": {"type": "array", "items": _ref("Ranking")}},
    },
    "Model": {
        "type": "object",
        "properties": {
            "ready": {"type": "boolean"},
            "model_uri": {"type": "string"},
            "model_version": _nullable("string"),
            "stamp": _nullable("string"),
            "evaluation_day": _nullable("string"),
            "w20": _nullable("number"),
            "published_model": _nullable("string"),
            "training_window": _nullable("string"),
            "profile": _nullable("string"),
            "model_age_days": _nullable("integer"),
            "model_stale": {"type": "boolean"},
            "canary": _nullable("object"),
            "load_error": _nullable("string"),
        },
    },
    "Error": {
        "type": "object",
        "required": ["error", "reason"],
        "properties": {
            "error": {"type": "string"},
            "field": _nullable("string"),
            "reason": {"type": "string"},
        },
    },
    "Probe": {"type": "object"},
    "AdmissionReview": {
        "type": "object",
        "required": ["apiVersion", "kind", "request"],
        "description": "admission.k8s.io/v1 AdmissionReview",
    },
}


def _post(summary: str, body: str, answer: str, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref(body)}},
            },
            "responses": {"200": _answer("the answer", answer), **extra, **_ERRORS},
        }
    }


def _get(summary: str, answers: dict[str, Any], open_route: bool = False) -> dict[str, Any]:
    operation = {"summary": summary, "responses": answers}
    if open_route:
        operation["security"] = []
    return {"get": operation}


def _webhook() -> dict[str, Any]:
    """The admission webhook: on a listener of its own (``webhook``), https and no token, so
    its path names that server and asks no security; a ranking that is late or queued too long
    is an allowed object with a warning, never a 503 or 504."""
    operation = _post(
        "Kubernetes mutating admission webhook: a JSONPatch of the ranking",
        "AdmissionReview",
        "AdmissionReview",
        {"400": _answer("not an AdmissionReview", "Error")},
    )["post"]
    operation["security"] = []
    operation["responses"] = {
        k: v for k, v in operation["responses"].items() if k not in ("401", "504")
    }
    return {
        "servers": [
            {
                "url": "https://{host}:{webhook_port}",
                "description": "the webhook's own listener (leap serve --webhook-port): TLS, "
                "no token, its own ranking threads",
                "variables": {
                    "host": {"default": "localhost"},
                    "webhook_port": {"default": "8443"},
                },
            }
        ],
        "post": operation,
    }


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``create_app``'s routes and ``webhook``'s."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "leap serve",
            "version": "1",
            "description": "LEAP's hardware ranking over HTTP (docs/serving.md)",
        },
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": {
            "/v1/rank": _post("rank one launch's candidates", "Launch", "Ranking", _BODY_ERRORS),
            "/v1/rank/batch": _post(
                "rank many launches on one model", "Batch", "Rankings", _BODY_ERRORS
            ),
            "/v1/k8s/mutate": _webhook(),
            "/v1/model": _get(
                "the model answering: version, evaluation day, w20",
                {"200": _answer("the model", "Model")},
            ),
            "/healthz": _get("the process is alive", {"200": _answer("alive", "Probe")}, True),
            "/readyz": _get(
                "a model is loaded",
                {"200": _answer("ready", "Probe"), "503": _answer("no model yet", "Probe")},
                True,
            ),
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics",
                    "responses": {
                        "200": {
                            "description": "the text exposition format",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        }
                    },
                }
            },
            "/openapi.json": _get(
                "this document",
                {
                    "200": {
                        "description": "OpenAPI 3.1",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            ),
        },
    }
