"""The task queue between producer and workers: memory (in-process) or RabbitMQ."""

from coding_agent.runtime.queue.base import Delivery, Held, MalformedMessage, QueuedTask, Reason, TaskQueue, decode, encode

__all__ = ["Delivery", "Held", "MalformedMessage", "QueuedTask", "Reason", "TaskQueue", "decode", "encode"]
