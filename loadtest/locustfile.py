"""Mixed traffic against a running attention-mt: ~70% single translations, ~20% batches of 8,
~10% introspection, over sentences of varied length.

    locust -f loadtest/locustfile.py --headless -u 8 -r 4 -t 30s --host http://127.0.0.1:8000

LOAD_MAX_REQUESTS bounds the run by request count as well as by time; LOAD_SOURCE and
LOAD_TARGET pick the pair.
"""

from __future__ import annotations

import os
import random

from locust import HttpUser, between, events, task
from locust.env import Environment

SENTENCES = [
    "Hi.",
    "Thank you.",
    "Tom is tired.",
    "I am full.",
    "Where is the station?",
    "Mary likes green tea.",
    "Tom chases Jerry.",
    "Please close the door.",
    "I don't know what to say.",
    "She has two brothers.",
    "We should leave before it rains.",
    "Can you help me carry this box?",
    "My father goes to work by bus.",
    "The children are playing in the park.",
    "I have been learning Chinese for two years.",
    "Tom told Mary that he would be late.",
    "It is too cold to go swimming today.",
    "He forgot to bring his umbrella again.",
    "Could you tell me how to get to the library?",
    "The meeting was put off until next week.",
]
SOURCE = os.environ.get("LOAD_SOURCE", "en")
TARGET = os.environ.get("LOAD_TARGET", "zh")
MAX_REQUESTS = int(os.environ.get("LOAD_MAX_REQUESTS", "3000"))


class Translator(HttpUser):
    wait_time = between(0.0, 0.05)

    @task(7)
    def single(self) -> None:
        body = {"q": random.choice(SENTENCES), "source": SOURCE, "target": TARGET}
        self.client.post("/v1/translate", json=body, name="translate 1")

    @task(2)
    def batch(self) -> None:
        body = {"q": random.sample(SENTENCES, 8), "source": SOURCE, "target": TARGET, "beam_size": 2}
        self.client.post("/v1/translate", json=body, name="translate 8")

    @task(1)
    def introspect(self) -> None:
        body = {"text": random.choice(SENTENCES), "source": SOURCE, "target": TARGET, "self_attention": False}
        self.client.post("/v1/attention", json=body, name="attention")


ENVIRONMENT: list[Environment] = []


@events.init.add_listener
def remember(environment: Environment, **kwargs: object) -> None:
    ENVIRONMENT.append(environment)


@events.request.add_listener
def stop_at_max_requests(**kwargs: object) -> None:
    runner = ENVIRONMENT[0].runner if ENVIRONMENT else None
    if runner is not None and runner.stats.total.num_requests >= MAX_REQUESTS:
        runner.quit()
