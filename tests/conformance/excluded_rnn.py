"""ONNX node test cases of the recurrent family (RNN, GRU, LSTM) that pegasus cannot run: none.

Every RNN/GRU/LSTM case passes, including the runtime-fed sequence_lens of test_lstm_with_peepholes.
"""

EXCLUDED: dict[str, str] = {}
