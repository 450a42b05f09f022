"""OpenAI / llama.cpp wire models: requests validated in full, responses shaped.

Routes import from here; see each module's docstring for the rules.
"""

from server.protocol.chat import (
    ChatCompletion,
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatCompletionMessage,
    ChatCompletionRequest,
    ChatMessage,
    ChoiceDelta,
    ChoiceLogprobs,
    ChunkChoice,
    DeltaFunction,
    DeltaToolCall,
    FunctionCall,
    MessageToolCall,
    NamedToolChoice,
    ResponseFunction,
    TokenLogprob,
    ToolCall,
    ToolDefinition,
    TopLogprob,
    new_chat_id,
)
from server.protocol.common import (
    CompletionTokensDetails,
    PromptTokensDetails,
    ResponseModel,
    StreamOptions,
    Timings,
    Usage,
    WireModel,
)
from server.protocol.completions import (
    Completion,
    CompletionChoice,
    CompletionChunk,
    CompletionLogprobs,
    CompletionRequest,
    new_completion_id,
)
from server.protocol.tokenize import (
    ChatRenderRequest,
    CountedTokens,
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizePromptRequest,
    TokenizeRequest,
    TokenizeResponse,
    TokenPiece,
)

__all__ = [name for name in dir() if not name.startswith("_")]
