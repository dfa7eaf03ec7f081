// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.30;

/// @notice The parts of an ERC-20 + EIP-3009 stablecoin (USDC) the escrow uses.
interface IStablecoin {
    function transfer(address to, uint256 value) external returns (bool);
    function transferFrom(address from, address to, uint256 value) external returns (bool);
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external;
}

/// @title Escrow
/// @notice Holds callers' deposits of one stablecoin keyed by their address. The gateway's
/// settler charges calls by call id; each call id is settled at most once, ever.
/// @dev Settlement rules (docs: DESIGN.md "Onchain"):
/// - chargeBatch never reverts for one bad charge: a call id already settled emits
///   ChargeSkipped (a retried batch is harmless); a charge above the balance emits
///   ChargeRefused and marks the call id Refused for good, so a replay later gives the same
///   answer rather than silently taking a newer deposit. An operator who wants to re-bill
///   a refused call does so under a new call id.
/// - Withdrawals are two-step: requestWithdrawal, then withdraw after `withdrawalDelay`.
///   The balance stays chargeable meanwhile (calls in flight still settle) and withdraw()
///   pays at most what is left.
/// - The owner manages roles only; neither owner nor settler can move a caller's funds
///   anywhere but to the treasury, and only by a charge event per call id.
/// - A call id's status is two bits of a storage word shared with its 127 numeric neighbours
///   (word callId >> 7, bits 2 * (callId & 127)). Any bytes32 is a valid call id; the gateway
///   numbers its calls consecutively, so a batch writes a few words instead of a new slot per
///   call: ~4k gas per charge instead of ~26k.
/// - Assumes a plain stablecoin (no fee on transfer, no rebasing), as USDC is.
contract Escrow {
    uint8 public constant STATUS_NONE = 0;
    uint8 public constant STATUS_CHARGED = 1;
    uint8 public constant STATUS_REFUSED = 2;

    struct Withdrawal {
        uint256 amount;
        uint256 readyAt;
    }

    IStablecoin public immutable token;
    /// @notice Seconds between requestWithdrawal and the earliest withdraw.
    uint256 public immutable withdrawalDelay;

    address public owner;
    address public pendingOwner;
    address public treasury;
    mapping(address => bool) public isSettler;
    mapping(address => uint256) public balanceOf;
    /// @dev Call id status words: see the contract's notes and callStatus.
    mapping(uint256 => uint256) private _statusWords;
    mapping(address => Withdrawal) private _withdrawals;

    event Deposited(address indexed account, address indexed from, uint256 amount);
    event Charged(bytes32 indexed callId, address indexed account, uint256 amount);
    event ChargeRefused(bytes32 indexed callId, address indexed account, uint256 amount, uint256 balance);
    /// @notice The call id was settled before (status says how); nothing changed.
    event ChargeSkipped(bytes32 indexed callId, address indexed account, uint256 amount, uint8 status);
    event WithdrawalRequested(address indexed account, uint256 amount, uint256 readyAt);
    event WithdrawalCancelled(address indexed account, uint256 amount);
    /// @notice `amount` paid out of `requested` (less when charges landed during the timelock).
    event Withdrawn(address indexed account, uint256 amount, uint256 requested);
    event SettlerUpdated(address indexed settler, bool enabled);
    event TreasuryUpdated(address indexed previousTreasury, address indexed treasury);
    event OwnershipTransferStarted(address indexed owner, address indexed pendingOwner);
    event OwnershipTransferred(address indexed previousOwner, address indexed newOwner);

    error NotOwner(address caller);
    error NotPendingOwner(address caller);
    error NotSettler(address caller);
    error ZeroAddress();
    error ZeroAmount();
    error LengthMismatch(uint256 callIds, uint256 accounts, uint256 amounts);
    error InsufficientBalance(uint256 balance, uint256 amount);
    error NoWithdrawalRequested(address account);
    error WithdrawalNotReady(uint256 readyAt);
    error TokenCallFailed();

    modifier onlyOwner() {
        if (msg.sender != owner) revert NotOwner(msg.sender);
        _;
    }

    constructor(address token_, address owner_, address treasury_, address settler_, uint256 withdrawalDelay_) {
        if (token_ == address(0) || owner_ == address(0) || treasury_ == address(0)) revert ZeroAddress();
        token = IStablecoin(token_);
        withdrawalDelay = withdrawalDelay_;
        owner = owner_;
        treasury = treasury_;
        emit OwnershipTransferred(address(0), owner_);
        emit TreasuryUpdated(address(0), treasury_);
        if (settler_ != address(0)) {
            isSettler[settler_] = true;
            emit SettlerUpdated(settler_, true);
        }
    }

    // ---- deposits ----

    function deposit(uint256 amount) external {
        _pull(msg.sender, amount);
        _credit(msg.sender, msg.sender, amount);
    }

    function depositFor(address account, uint256 amount) external {
        if (account == address(0)) revert ZeroAddress();
        _pull(msg.sender, amount);
        _credit(account, msg.sender, amount);
    }

    /// @notice Gasless deposit: anyone may submit `from`'s EIP-3009 ReceiveWithAuthorization
    /// (to = this escrow); the funds are always credited to `from`. receiveWithAuthorization
    /// only accepts the payee as caller, so a front-runner cannot spend the signature elsewhere.
    function depositWithAuthorization(
        address from,
        uint256 amount,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        if (amount == 0) revert ZeroAmount();
        token.receiveWithAuthorization(from, address(this), amount, validAfter, validBefore, nonce, v, r, s);
        _credit(from, from, amount);
    }

    // ---- settlement ----

    /// @notice Charge calls by id; one Charged, ChargeRefused or ChargeSkipped event per entry.
    /// @return total The amount moved to the treasury by this batch.
    function chargeBatch(bytes32[] calldata callIds, address[] calldata accounts, uint256[] calldata amounts)
        external
        returns (uint256 total)
    {
        if (!isSettler[msg.sender]) revert NotSettler(msg.sender);
        uint256 n = callIds.length;
        if (accounts.length != n || amounts.length != n) {
            revert LengthMismatch(n, accounts.length, amounts.length);
        }
        // The status word in use is kept in memory while consecutive call ids share it, and
        // stored when the batch moves to another word. A word key (callId >> 7) is below 2^249,
        // so none equals the starting sentinel.
        uint256 key = type(uint256).max;
        uint256 word;
        bool dirty;
        for (uint256 i; i < n; ++i) {
            bytes32 callId = callIds[i];
            address account = accounts[i];
            uint256 amount = amounts[i];
            uint256 id = uint256(callId);
            if (id >> 7 != key) {
                if (dirty) _statusWords[key] = word;
                key = id >> 7;
                word = _statusWords[key];
                dirty = false;
            }
            uint256 shift = (id & 127) << 1;
            uint8 status = uint8((word >> shift) & 3);
            if (status != STATUS_NONE) {
                emit ChargeSkipped(callId, account, amount, status);
                continue;
            }
            dirty = true;
            uint256 balance = balanceOf[account];
            if (amount > balance) {
                word |= uint256(STATUS_REFUSED) << shift;
                emit ChargeRefused(callId, account, amount, balance);
                continue;
            }
            word |= uint256(STATUS_CHARGED) << shift;
            unchecked {
                // amount <= balance, and the sum of charges is bounded by the escrow's holdings.
                balanceOf[account] = balance - amount;
                total += amount;
            }
            emit Charged(callId, account, amount);
        }
        if (dirty) _statusWords[key] = word;
        if (total != 0) _pay(treasury, total);
    }

    /// @notice STATUS_NONE, STATUS_CHARGED or STATUS_REFUSED.
    function callStatus(bytes32 callId) public view returns (uint8) {
        uint256 id = uint256(callId);
        return uint8((_statusWords[id >> 7] >> ((id & 127) << 1)) & 3);
    }

    function isCharged(bytes32 callId) external view returns (bool) {
        return callStatus(callId) == STATUS_CHARGED;
    }

    // ---- withdrawals ----

    /// @notice Start (or restart, replacing the previous request) the withdrawal timelock.
    function requestWithdrawal(uint256 amount) external {
        if (amount == 0) revert ZeroAmount();
        uint256 balance = balanceOf[msg.sender];
        if (amount > balance) revert InsufficientBalance(balance, amount);
        uint256 readyAt = block.timestamp + withdrawalDelay;
        _withdrawals[msg.sender] = Withdrawal(amount, readyAt);
        emit WithdrawalRequested(msg.sender, amount, readyAt);
    }

    function cancelWithdrawal() external {
        uint256 amount = _withdrawals[msg.sender].amount;
        if (amount == 0) revert NoWithdrawalRequested(msg.sender);
        delete _withdrawals[msg.sender];
        emit WithdrawalCancelled(msg.sender, amount);
    }

    /// @notice Pay out the requested amount, capped at the balance left after charges.
    function withdraw() external returns (uint256 paid) {
        Withdrawal memory w = _withdrawals[msg.sender];
        if (w.amount == 0) revert NoWithdrawalRequested(msg.sender);
        if (block.timestamp < w.readyAt) revert WithdrawalNotReady(w.readyAt);
        delete _withdrawals[msg.sender];
        uint256 balance = balanceOf[msg.sender];
        paid = w.amount < balance ? w.amount : balance;
        balanceOf[msg.sender] = balance - paid;
        emit Withdrawn(msg.sender, paid, w.amount);
        if (paid != 0) _pay(msg.sender, paid);
    }

    function pendingWithdrawal(address account) external view returns (uint256 amount, uint256 readyAt) {
        Withdrawal memory w = _withdrawals[account];
        return (w.amount, w.readyAt);
    }

    // ---- roles ----

    function setSettler(address settler, bool enabled) external onlyOwner {
        if (settler == address(0)) revert ZeroAddress();
        isSettler[settler] = enabled;
        emit SettlerUpdated(settler, enabled);
    }

    function setTreasury(address treasury_) external onlyOwner {
        if (treasury_ == address(0)) revert ZeroAddress();
        emit TreasuryUpdated(treasury, treasury_);
        treasury = treasury_;
    }

    /// @notice Two-step transfer: the new owner must call acceptOwnership (guards against typos).
    function transferOwnership(address newOwner) external onlyOwner {
        pendingOwner = newOwner;
        emit OwnershipTransferStarted(owner, newOwner);
    }

    function acceptOwnership() external {
        if (msg.sender != pendingOwner) revert NotPendingOwner(msg.sender);
        emit OwnershipTransferred(owner, msg.sender);
        owner = msg.sender;
        pendingOwner = address(0);
    }

    // ---- internals ----

    function _credit(address account, address from, uint256 amount) private {
        balanceOf[account] += amount;
        emit Deposited(account, from, amount);
    }

    function _pull(address from, uint256 amount) private {
        if (amount == 0) revert ZeroAmount();
        _tokenCall(abi.encodeCall(IStablecoin.transferFrom, (from, address(this), amount)));
    }

    function _pay(address to, uint256 amount) private {
        _tokenCall(abi.encodeCall(IStablecoin.transfer, (to, amount)));
    }

    // Bubbles the token's own revert (e.g. InsufficientBalance) and accepts tokens that
    // return nothing, like SafeERC20.
    function _tokenCall(bytes memory data) private {
        (bool ok, bytes memory ret) = address(token).call(data);
        if (!ok) {
            assembly ("memory-safe") {
                revert(add(ret, 32), mload(ret))
            }
        }
        if (ret.length == 0 ? address(token).code.length == 0 : !abi.decode(ret, (bool))) revert TokenCallFailed();
    }
}
