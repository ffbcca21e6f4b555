from pydantic import BaseModel, ConfigDict


class EventData(BaseModel):
    """Base of every payload: tolerant on read (unknown fields ignored), immutable."""

    model_config = ConfigDict(extra="ignore", frozen=True)
